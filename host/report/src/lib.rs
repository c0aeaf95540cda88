//! `ecdysis-host report`: one self-contained HTML page for run, training and
//! experiment directories (several at once for a side-by-side comparison).
//!
//! The page works offline and without scripting: CSS and the little script
//! are inline, charts are inline SVG drawn with `plotters`, folding is
//! `<details>`. The script only adds the trajectory filters. The output is a
//! pure function of the directories' contents (no clock, no randomness but
//! the seeded bootstrap), so the evaluation service can serve the same page.
//!
//! Every value taken from a result file is escaped ([`html::esc`]): a model,
//! a harness or a coding agent may have written anything into a trajectory.
//!
//! It reads what the runner, training and the proxy write, through their
//! types; never the service, tracking or the CLI, which use it.

pub mod charts;
mod compare;
pub mod experiment;
pub mod failures;
pub mod html;
pub mod load;
mod proxy;
mod run;
pub mod stats;
mod train;
mod trajectory;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

pub use load::{DirKind, EXPERIMENT_FILE, detect};

use ecdysis_model::ModelId;
use html::esc;
use load::{ExperimentData, RunData, TrainData};

/// The label every page carries when a `sim:` testbed model was the agent.
pub use ecdysis_runner::eval::SIMULATED_LABEL;

/// Why a report could not be made, naming the offending path.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// `report` was called without directories.
    #[error("no directory given: pass run, training or experiment directories")]
    NoDirectories,
    /// A path given is not a directory.
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
    /// A directory is none of the three kinds of result directory.
    #[error(
        "{0} is not a result directory: expected a run (config.json + trajectories.jsonl), a training run (rounds.jsonl, initial, incumbent), an experiment (experiment.json, or one training directory per method) or a proxy's records (proxy.json)"
    )]
    Unrecognised(PathBuf),
    /// A file the directory's kind requires (its `config.json`) is absent.
    #[error("{0} is missing")]
    Missing(PathBuf),
    /// A file does not parse (anywhere but a torn last line).
    #[error("{path} is corrupt: {reason}")]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// What is wrong (with the line number, for a JSON-lines file).
        reason: String,
    },
    /// A file could not be read, or the page could not be written.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A harness filter matched none of the runs read.
    #[error("no run of a harness starting with {want:?}; the runs read ran: {}", found.join(", "))]
    NoSuchHarness {
        /// The filter as given.
        want: String,
        /// The harnesses of the runs read (`none`: Direct; `unknown`: no
        /// readable config).
        found: Vec<String>,
    },
    /// plotters failed to draw a chart (its message).
    #[error("drawing a chart failed: {0}")]
    Chart(String),
}

/// How to render.
#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// Bootstrap resamples for the 95% intervals.
    pub bootstrap_samples: usize,
    /// Seed of the bootstrap (a report is deterministic).
    pub seed: u64,
    /// The page title (default: from the directories).
    pub title: Option<String>,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            bootstrap_samples: 2000,
            seed: 0,
            title: None,
        }
    }
}

/// A loaded directory of any kind.
pub(crate) enum Loaded {
    Run(Box<RunData>),
    Training(Box<TrainData>),
    Experiment(Box<ExperimentData>),
    /// A proxy's records directory (`proxy --records DIR`).
    Proxy(Box<ecdysis_proxy::records::Records>),
}

impl Loaded {
    fn load(dir: &Path) -> Result<Loaded, ReportError> {
        if ecdysis_proxy::records::is_records_dir(dir) {
            return Ok(Loaded::Proxy(Box::new(proxy::load(dir)?)));
        }
        Ok(match detect(dir)? {
            DirKind::Run => Loaded::Run(Box::new(RunData::load(dir)?)),
            DirKind::Training => Loaded::Training(Box::new(TrainData::load(dir)?)),
            DirKind::Experiment => Loaded::Experiment(Box::new(ExperimentData::load(dir)?)),
        })
    }

    fn dir(&self) -> &Path {
        match self {
            Loaded::Run(r) => &r.dir,
            Loaded::Training(t) => &t.dir,
            Loaded::Experiment(e) => &e.dir,
            Loaded::Proxy(p) => &p.dir,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Loaded::Run(_) => "run",
            Loaded::Training(_) => "training",
            Loaded::Experiment(_) => "experiment",
            Loaded::Proxy(_) => "proxy records",
        }
    }

    /// The `sim:` agent models behind this directory's numbers.
    fn simulated_models(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut add = |m: &ModelId| {
            if m.is_simulated() {
                out.insert(m.to_string());
            }
        };
        match self {
            Loaded::Run(r) => add(&r.config.agent_model),
            Loaded::Training(t) => add(&t.config.train.agent_model),
            Loaded::Experiment(e) => {
                if let Some(f) = &e.file {
                    add(&f.agent_model);
                    for t in &f.transfer {
                        add(&t.agent_model);
                    }
                }
                for (_, t) in &e.methods {
                    add(&t.config.train.agent_model);
                }
                for r in e.transfer_runs.values() {
                    add(&r.config.agent_model);
                }
            }
            // The proxy serves whatever agent calls it; its records name no
            // agent model.
            Loaded::Proxy(_) => {}
        }
        out
    }
}

/// The page being written: its body and table of contents.
pub(crate) struct Page {
    pub opts: ReportOptions,
    /// Several directories on one page: each section repeats its own
    /// simulated-agent label.
    pub multi: bool,
    toc: Vec<(String, String, u8)>,
    pub body: String,
}

impl Page {
    /// Open a section: an `<h2>`/`<h3>` with `id`, listed in the contents.
    pub fn heading(&mut self, level: u8, id: &str, title: &str) {
        self.toc.push((id.to_string(), title.to_string(), level));
        self.body += &format!("<h{level} id=\"{}\">{}</h{level}>\n", esc(id), esc(title));
    }
}

/// The banner a page with a simulated agent carries.
pub(crate) fn sim_banner(models: &BTreeSet<String>) -> String {
    if models.is_empty() {
        return String::new();
    }
    let list: Vec<String> = models
        .iter()
        .map(|m| format!("<code>{}</code>", esc(m)))
        .collect();
    format!(
        "<div class=\"sim-banner\" role=\"note\"><strong>{}</strong> — the agent ({}) is a simulated testbed model: it follows the task's gold plan with injected quirks, so its scores test the harness and the pipeline, not a language model.</div>\n",
        esc(SIMULATED_LABEL),
        list.join(", ")
    )
}

fn dir_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

/// Render one HTML page for `dirs` (run, training or experiment
/// directories; several are compared side by side, then shown one by one).
pub fn render(dirs: &[PathBuf], opts: &ReportOptions) -> Result<String, ReportError> {
    if dirs.is_empty() {
        return Err(ReportError::NoDirectories);
    }
    let loaded: Vec<Loaded> = dirs
        .iter()
        .map(|d| Loaded::load(d))
        .collect::<Result<_, _>>()?;
    let title = opts.title.clone().unwrap_or_else(|| {
        let names: Vec<String> = loaded
            .iter()
            .map(|l| format!("{} {}", l.kind(), dir_name(l.dir())))
            .collect();
        format!("Ecdysis report: {}", names.join(" vs "))
    });
    let mut page = Page {
        opts: opts.clone(),
        multi: loaded.len() > 1,
        toc: Vec::new(),
        body: String::new(),
    };
    if loaded.len() > 1 {
        compare::section(&mut page, &loaded)?;
    }
    for (i, l) in loaded.iter().enumerate() {
        let prefix = format!("d{i}");
        match l {
            Loaded::Run(r) => run::section(&mut page, &prefix, r)?,
            Loaded::Training(t) => train::section(&mut page, &prefix, t, 2)?,
            Loaded::Experiment(e) => experiment::section(&mut page, &prefix, e)?,
            Loaded::Proxy(p) => proxy::section(&mut page, &prefix, p),
        }
    }
    let simulated: BTreeSet<String> = loaded.iter().flat_map(|l| l.simulated_models()).collect();
    Ok(shell(&title, &page, &simulated, &loaded))
}

/// Render and write atomically to `out`.
pub fn write(dirs: &[PathBuf], opts: &ReportOptions, out: &Path) -> Result<u64, ReportError> {
    let html = render(dirs, opts)?;
    ecdysis_sys::fsutil::atomic_write(out, html.as_bytes()).map_err(|e| ReportError::Io {
        path: out.to_path_buf(),
        source: e,
    })?;
    Ok(html.len() as u64)
}

fn shell(title: &str, page: &Page, simulated: &BTreeSet<String>, loaded: &[Loaded]) -> String {
    let mut toc =
        String::from("<nav class=\"toc\" aria-label=\"contents\"><strong>Contents</strong><ul>");
    for (id, t, level) in page.toc.iter().filter(|t| t.2 <= 3) {
        toc += &format!(
            "<li class=\"l{level}\"><a href=\"#{}\">{}</a></li>",
            esc(id),
            esc(t)
        );
    }
    toc += "</ul></nav>";
    let sources: Vec<String> = loaded
        .iter()
        .map(|l| {
            format!(
                "<li>{} <code>{}</code></li>",
                l.kind(),
                esc(&l.dir().display().to_string())
            )
        })
        .collect();
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<meta name=\"generator\" content=\"ecdysis-host report\">\n<title>{title}</title>\n<script>{ERROR_HOOK}</script>\n<style>{CSS}</style>\n</head>\n<body>\n<header class=\"top\"><h1>{title}</h1><ul class=\"sources\">{sources}</ul></header>\n{banner}<div class=\"layout\">{toc}<main>\n{body}</main></div>\n<footer>Written by <code>ecdysis-host report</code> from the directories above; intervals are 95% percentile bootstrap over tasks ({samples} resamples, seed {seed}).</footer>\n<script>{SCRIPT}</script>\n</body>\n</html>\n",
        title = esc(title),
        sources = sources.join(""),
        banner = sim_banner(simulated),
        body = page.body,
        samples = page.opts.bootstrap_samples,
        seed = page.opts.seed,
    )
}

/// Runs first: any script error (ours, since the page holds no other
/// script) is written onto the document, where a test can find it.
const ERROR_HOOK: &str = "window.addEventListener('error',function(e){document.documentElement.setAttribute('data-script-error',String(e.message||e));});";

/// The filters of the trajectory viewers, opening a linked episode, and a
/// marker that the script ran to the end.
const SCRIPT: &str = include_str!("report.js");

const CSS: &str = include_str!("report.css");

#[cfg(test)]
mod tests;

//! `ecdysis-host failures`: the failure groups of any result directories,
//! whether or not they come from training.
//!
//! Every run directory under the given ones (a run, a training's
//! evaluations, an experiment's methods) is read line by line: a line that
//! does not parse is reported with its file and line number and skipped,
//! and everything that parses is still grouped. An episode seen in several
//! directories (the same harness, agent, task and trial: a training's
//! evaluations replayed from the response cache) counts once.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::ReportError;
use super::html::esc;
use super::load::{detect, read_json};
use ecdysis_evolve::aggregate::failure_record::{self, FailureRecord};
use ecdysis_evolve::aggregate::labeler;
use ecdysis_evolve::aggregate::mechanism::Label;
use ecdysis_evolve::aggregate::{self, FailureGroup};
use ecdysis_model::{ChatModel, ErrorClass};
use ecdysis_runner::agent::EpisodeRecord;
use ecdysis_runner::eval::rundir::{CONFIG_FILE, TRAJECTORIES_FILE};

/// How deep under a given directory run directories are looked for (an
/// experiment's `method/evals/label/` is three levels down).
const MAX_DEPTH: usize = 5;

/// Directories never searched: harness sources and build trees.
const SKIPPED: &[&str] = &["source", "staging", "target", "candidates", "node_modules"];

/// What grouping needs of a run's `config.json` (read this way, a config of
/// an older or newer host still names its harness and agent).
#[derive(serde::Deserialize)]
struct ConfigOutline {
    harness: Option<String>,
    agent_model: String,
}

/// One run directory that was read.
#[derive(Debug, Clone, Serialize)]
pub struct Source {
    /// The run directory.
    pub dir: PathBuf,
    /// The harness it ran (`none` without one; `unknown` when its config
    /// cannot be read).
    pub harness: String,
    /// The agent model.
    pub agent: String,
    /// Episodes read from it (before removing ones already seen).
    pub episodes: usize,
}

/// A line or file that could not be read.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    /// The file.
    pub path: PathBuf,
    /// The 1-based line, for a JSON-lines file.
    pub line: Option<usize>,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(n) => write!(f, "{} line {n}: {}", self.path.display(), self.reason),
            None => write!(f, "{}: {}", self.path.display(), self.reason),
        }
    }
}

/// The failure groups of some result directories.
#[derive(Debug, Clone, Serialize)]
pub struct FailureView {
    /// The run directories read.
    pub sources: Vec<Source>,
    /// Distinct episodes read.
    pub episodes: usize,
    /// An episode fails when its reward is below this.
    pub lambda: f64,
    /// Failing episodes.
    pub failures: usize,
    /// The groups, recurring first.
    pub groups: Vec<FailureGroup>,
    /// What could not be read (the rest is still grouped).
    pub problems: Vec<Problem>,
    /// A `sim:` testbed agent ran some of the episodes.
    pub simulated: bool,
    /// An LLM's labels beside the key's, when a labeler was asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm: Option<LlmLabels>,
}

/// An LLM labeler's labels of every failure ([`label_with`]).
#[derive(Debug, Clone, Serialize)]
pub struct LlmLabels {
    /// The labeler model.
    pub model: String,
    /// Per group, per failure (in the group's order): the model's label,
    /// or `None` where its reply named none.
    pub per_group: Vec<Vec<Option<Label>>>,
    /// Failures the model labelled.
    pub labelled: usize,
    /// Of those, the ones whose label equals the key's.
    pub agree: usize,
    /// Why the others got none (the task and the error).
    pub errors: Vec<String>,
    /// Why labelling stopped before every failure was asked: a call failed
    /// for the endpoint's or the configuration's sake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

/// Ask `model` for each failure's label (one call each), beside the key's.
pub async fn label_with(view: &mut FailureView, model: &dyn ChatModel, structured: bool) {
    let (mut labelled, mut agree) = (0, 0);
    let mut per_group = Vec::new();
    let mut errors = Vec::new();
    // After a call that failed for the endpoint's or the configuration's
    // sake (retries already spent), the other calls would fail the same way,
    // each after its own retries: they are not asked.
    let mut stopped: Option<String> = None;
    let mut not_asked = 0usize;
    for g in &view.groups {
        let mut labels = Vec::new();
        for (i, r) in g.records.iter().enumerate() {
            if stopped.is_some() {
                not_asked += 1;
                labels.push(None);
                continue;
            }
            let label = match labeler::llm_label(model, r, structured).await {
                Ok(l) => Some(l),
                Err(e) => {
                    let error = format!("task {} trial {}: {e}", r.task_id, r.trial);
                    if matches!(&e, labeler::LabelError::Model(m) if m.class() != ErrorClass::Model)
                    {
                        stopped = Some(error.clone());
                    }
                    errors.push(error);
                    None
                }
            };
            if let Some(l) = label {
                labelled += 1;
                agree += usize::from(g.labels.get(i) == Some(&l));
            }
            labels.push(label);
        }
        per_group.push(labels);
    }
    let stopped = stopped.map(|why| format!("{why}; {not_asked} more failure(s) not asked"));
    view.llm = Some(LlmLabels {
        model: model.name().to_string(),
        per_group,
        labelled,
        agree,
        errors,
        stopped,
    });
}

/// Which episodes to group.
#[derive(Debug, Clone, Default)]
pub struct FailureFilter {
    /// Only runs of the harness whose hash starts with this (`none` for
    /// runs without one).
    pub harness: Option<String>,
}

/// Read every run directory under `dirs` and group the failures (reward
/// below `lambda`). A path that is not a result directory is an error; a
/// damaged line is a [`Problem`] and the rest is still read.
pub fn collect(
    dirs: &[PathBuf],
    lambda: f64,
    filter: &FailureFilter,
) -> Result<FailureView, ReportError> {
    if dirs.is_empty() {
        return Err(ReportError::NoDirectories);
    }
    let mut runs = Vec::new();
    for d in dirs {
        detect(d)?;
        find_runs(d, 0, &mut runs);
    }
    runs.sort();
    runs.dedup();
    let mut sources = Vec::new();
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    let mut episodes = Vec::new();
    let mut simulated = false;
    let mut harnesses_seen = BTreeSet::new();
    for run in runs {
        let config_path = run.join(CONFIG_FILE);
        let read: Result<ConfigOutline, String> = match read_json(&config_path) {
            Ok(Some(c)) => Ok(c),
            Ok(None) => Err("missing".to_string()),
            Err(ReportError::Corrupt { reason, .. }) => Err(format!("corrupt: {reason}")),
            Err(ReportError::Io { source, .. }) => Err(source.to_string()),
            Err(e) => Err(e.to_string()),
        };
        // Without its config a run's harness is unknown, never "none" (which
        // means Direct): it is grouped as `unknown`, and a harness filter
        // cannot select it.
        let config = match read {
            Ok(c) => Some(c),
            Err(why) => {
                problems.push(Problem {
                    path: config_path,
                    line: None,
                    reason: format!("{why}; the run's harness and agent are unknown"),
                });
                None
            }
        };
        let harness = match &config {
            Some(c) => c.harness.clone().unwrap_or_else(|| "none".to_string()),
            None => "unknown".to_string(),
        };
        harnesses_seen.insert(harness.clone());
        if let Some(want) = &filter.harness
            && (config.is_none() || !harness.starts_with(want.as_str()))
        {
            continue;
        }
        let agent = config
            .as_ref()
            .map_or_else(|| "unknown".to_string(), |c| c.agent_model.clone());
        simulated |= ecdysis_sys::ids::ModelId::names_simulated(&agent);
        let (records, bad) = read_episodes(&run.join(TRAJECTORIES_FILE));
        problems.extend(bad);
        sources.push(Source {
            dir: run.clone(),
            harness: harness.clone(),
            agent: agent.clone(),
            episodes: records.len(),
        });
        for r in records {
            if seen.insert((harness.clone(), agent.clone(), r.task_id.clone(), r.trial)) {
                episodes.push(r);
            }
        }
    }
    if let Some(want) = &filter.harness
        && sources.is_empty()
        && !harnesses_seen.is_empty()
    {
        return Err(ReportError::NoSuchHarness {
            want: want.clone(),
            found: harnesses_seen
                .iter()
                .map(|h| {
                    ecdysis_sys::text::head_chars(h, 12)
                        .unwrap_or(h)
                        .to_string()
                })
                .collect(),
        });
    }
    let mut view = view_of(&episodes, lambda, simulated);
    view.sources = sources;
    view.problems = problems;
    Ok(view)
}

/// The groups of `episodes` already read (a report's run), no sources.
pub fn view_of(episodes: &[EpisodeRecord], lambda: f64, simulated: bool) -> FailureView {
    let failures: Vec<FailureRecord> = failure_record::failures(episodes, lambda);
    FailureView {
        sources: Vec::new(),
        episodes: episodes.len(),
        lambda,
        failures: failures.len(),
        groups: aggregate::aggregate(&failures),
        problems: Vec::new(),
        simulated,
        llm: None,
    }
}

fn find_runs(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    // Anything under the name counts (a directory, a pipe, a broken link):
    // reading it then names the problem instead of leaving the run out.
    if std::fs::symlink_metadata(dir.join(TRAJECTORIES_FILE)).is_ok() {
        out.push(dir.to_path_buf());
    }
    if depth >= MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut subdirs: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| !SKIPPED.contains(&n) && !n.starts_with('.'))
        })
        .collect();
    subdirs.sort();
    for d in subdirs {
        find_runs(&d, depth + 1, out);
    }
}

/// Unreadable lines of one file named one by one; the rest are counted in
/// one problem, so a file that is not a trajectories file at all (binary, a
/// log) reads as a few lines, not one per line of it.
const LINE_PROBLEMS_SHOWN: usize = 10;

/// The episodes of a trajectories file, each line on its own: a line that
/// does not parse (a truncated last line included) is a problem naming it.
/// A task and trial recorded twice keeps its first line, as the runner's
/// resume and summary do (`rundir::by_pair`).
pub fn read_episodes(path: &Path) -> (Vec<EpisodeRecord>, Vec<Problem>) {
    let mut problems = Vec::new();
    let file = match ecdysis_sys::fsutil::open_regular(path) {
        Ok(f) => f,
        Err(e) => {
            problems.push(Problem {
                path: path.to_path_buf(),
                line: None,
                reason: format!("{e} (none of its episodes read)"),
            });
            return (Vec::new(), problems);
        }
    };
    let mut by_pair: BTreeMap<(String, u32), (usize, EpisodeRecord)> = BTreeMap::new();
    let (mut unshown, mut first_unshown) = (0usize, None);
    let reader = std::io::BufReader::new(file);
    for (i, line) in reader.split(b'\n').enumerate() {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                problems.push(Problem {
                    path: path.to_path_buf(),
                    line: Some(i + 1),
                    reason: format!("{e} (the rest of the file is not read)"),
                });
                break;
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<EpisodeRecord>(&line) {
            Ok(r) => {
                by_pair
                    .entry((r.task_id.clone(), r.trial))
                    .or_insert((i, r));
            }
            Err(_) if problems.len() >= LINE_PROBLEMS_SHOWN => {
                unshown += 1;
                first_unshown.get_or_insert(i + 1);
            }
            Err(e) => problems.push(Problem {
                path: path.to_path_buf(),
                line: Some(i + 1),
                reason: format!("{e} (skipped)"),
            }),
        }
    }
    if let Some(first) = first_unshown {
        problems.push(Problem {
            path: path.to_path_buf(),
            line: None,
            reason: format!("{unshown} more unreadable line(s), from line {first} on (skipped)"),
        });
    }
    let mut records: Vec<(usize, EpisodeRecord)> = by_pair.into_values().collect();
    records.sort_by_key(|(i, _)| *i);
    (records.into_iter().map(|(_, r)| r).collect(), problems)
}

/// The label each group goes by (`R1`… recurring, `A1`… single-task).
fn labels(groups: &[FailureGroup]) -> Vec<String> {
    let (mut r, mut a) = (0, 0);
    groups
        .iter()
        .map(|g| {
            if g.recurring {
                r += 1;
                format!("R{r}")
            } else {
                a += 1;
                format!("A{a}")
            }
        })
        .collect()
}

/// The view as text: a heading per group (mechanism, label, tasks), its
/// details, and one excerpt, reply by reply.
pub fn render_text(view: &FailureView) -> String {
    let mut out = String::new();
    if view.simulated {
        out += &format!("{}\n", super::SIMULATED_LABEL);
    }
    out += &format!(
        "{} episode(s) from {} run director{}; {} below λ = {}; {} group(s), {} recurring\n",
        view.episodes,
        view.sources.len(),
        if view.sources.len() == 1 { "y" } else { "ies" },
        view.failures,
        view.lambda,
        view.groups.len(),
        view.groups.iter().filter(|g| g.recurring).count()
    );
    if let Some(llm) = &view.llm {
        out += &format!(
            "labels by {}: {} of {} failures labelled, {} as the key labels them\n",
            llm.model, llm.labelled, view.failures, llm.agree
        );
    }
    for (n, (g, label)) in view.groups.iter().zip(labels(&view.groups)).enumerate() {
        out += &format!(
            "\n{label} {}\n   label: {}\n   {} failing episode(s) on {} task(s): {}\n",
            shown(&g.key),
            g.label.text(),
            g.records.len(),
            g.tasks.len(),
            g.tasks.join(", ")
        );
        for d in &g.details {
            out += &format!(
                "   - {}: {} task(s) ({})\n",
                shown(&d.detail),
                d.tasks.len(),
                d.tasks.join(", ")
            );
        }
        if let Some(llm) = &view.llm {
            let mut counts: std::collections::BTreeMap<String, usize> = BTreeMap::new();
            for l in llm.per_group.get(n).into_iter().flatten() {
                let text = l.map_or_else(|| "no label".to_string(), Label::text);
                *counts.entry(text).or_default() += 1;
            }
            let list: Vec<String> = counts.iter().map(|(t, k)| format!("{t} ×{k}")).collect();
            out += &format!("   labels by {}: {}\n", llm.model, list.join(", "));
        }
        if let Some(r) = g.records.first() {
            out += "   e.g. ";
            out += &r.excerpt().replace('\n', "\n   ");
            out = out.trim_end().to_string();
            out.push('\n');
        }
    }
    out
}

/// A group's key or detail as printed: an error class is built from the
/// message's words, and a message the classes do not know (a whole stack
/// trace, a result of megabytes without spaces) would otherwise print whole.
/// JSON output keeps it whole.
pub(crate) fn shown(key: &str) -> String {
    ecdysis_sys::text::clip(key, KEY_SHOWN)
}

/// Characters of a group's key or detail printed.
const KEY_SHOWN: usize = 200;

/// The view as an HTML section (every value escaped).
pub fn render_html(view: &FailureView) -> String {
    let mut out = String::from("<div class=\"failures\">\n");
    if view.simulated {
        out += &format!("<p class=\"sim\">{}</p>\n", esc(super::SIMULATED_LABEL));
    }
    out += &format!(
        "<p>{} episode(s); {} below λ = {}; {} group(s), {} recurring (grouped by mechanism: how the episode finished relative to its last calls; details by the class of the last result).</p>\n",
        view.episodes,
        view.failures,
        view.lambda,
        view.groups.len(),
        view.groups.iter().filter(|g| g.recurring).count()
    );
    if view.groups.is_empty() {
        out += "<p>No failing episode.</p>";
    }
    for (g, label) in view.groups.iter().zip(labels(&view.groups)) {
        out += &format!(
            "<details{}><summary><strong>{}</strong> {} — <i>{}</i> — {} task(s)</summary>\n<ul>",
            if g.recurring { " open" } else { "" },
            esc(&label),
            esc(&shown(&g.key)),
            esc(&g.label.text()),
            g.tasks.len()
        );
        for d in &g.details {
            out += &format!(
                "<li>{}: {}</li>",
                esc(&shown(&d.detail)),
                esc(&d.tasks.join(", "))
            );
        }
        out += "</ul>";
        if let Some(r) = g.records.first() {
            out += &format!("<pre>{}</pre>", esc(&r.excerpt()));
        }
        out += "</details>\n";
    }
    out + "</div>\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use ecdysis_runner::agent::{CallSource, EndReason, Entry};

    fn episode(task: &str, calls: &[(u32, &str, &str, bool)]) -> EpisodeRecord {
        let mut r = EpisodeRecord::bare(task, 0, 0.0);
        r.domain = "agentbench/dbbench".into();
        r.end = EndReason::AgentStop;
        let mut last = 0;
        for (step, name, content, error) in calls {
            if *step != last {
                r.transcript.push(Entry::Agent {
                    step: *step,
                    text: None,
                    tool_calls: vec![],
                    testbed: None,
                    withheld: None,
                });
                last = *step;
            }
            r.transcript.push(Entry::Tool {
                step: *step,
                call_id: format!("{task}-{step}-{name}"),
                name: name.to_string(),
                arguments: "{}".into(),
                proposed: None,
                content: content.to_string(),
                error: *error,
                blocked: false,
                source: CallSource::Model,
            });
        }
        r
    }

    fn write_run(dir: &Path, lines: &[String]) {
        std::fs::create_dir_all(dir).unwrap();
        let config = serde_json::json!({"harness": null, "agent_model": "qwen"});
        std::fs::write(dir.join(CONFIG_FILE), config.to_string()).unwrap();
        std::fs::write(dir.join(TRAJECTORIES_FILE), lines.join("")).unwrap();
    }

    fn one_line(task: &str) -> String {
        let r = episode(
            task,
            &[(1, "commit_final_answer", "Final answer committed.", false)],
        );
        format!("{}\n", serde_json::to_string(&r).unwrap())
    }

    #[test]
    fn a_trajectories_file_that_is_a_pipe_or_a_directory_is_named_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        let (pipe, dir, good) = (
            tmp.path().join("pipe"),
            tmp.path().join("dir"),
            tmp.path().join("good"),
        );
        write_run(&pipe, &[]);
        std::fs::remove_file(pipe.join(TRAJECTORIES_FILE)).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(pipe.join(TRAJECTORIES_FILE))
            .status()
            .unwrap();
        assert!(made.success());
        write_run(&dir, &[]);
        std::fs::remove_file(dir.join(TRAJECTORIES_FILE)).unwrap();
        std::fs::create_dir(dir.join(TRAJECTORIES_FILE)).unwrap();
        write_run(&good, &[one_line("a")]);
        // On another thread: reading the pipe would block forever.
        let (tx, rx) = std::sync::mpsc::channel();
        let dirs = vec![pipe.clone(), dir.clone(), good];
        std::thread::spawn(move || {
            tx.send(collect(&dirs, 1.0, &FailureFilter::default()).map_err(|e| e.to_string()))
                .unwrap();
        });
        let view = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("collect returned")
            .unwrap();
        assert_eq!(view.episodes, 1, "the good run is still read");
        let named: Vec<String> = view.problems.iter().map(ToString::to_string).collect();
        assert_eq!(named.len(), 2, "{named:?}");
        for (run, text) in [(&pipe, &named[1]), (&dir, &named[0])] {
            assert!(
                text.starts_with(&run.join(TRAJECTORIES_FILE).display().to_string())
                    && text.contains("not a regular file"),
                "{text}"
            );
        }
    }

    #[test]
    fn a_run_without_a_readable_config_has_an_unknown_harness_no_filter_selects() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        write_run(&run, &[one_line("a")]);
        std::fs::write(run.join(CONFIG_FILE), "{").unwrap();
        let view = collect(std::slice::from_ref(&run), 1.0, &FailureFilter::default()).unwrap();
        assert_eq!(
            (view.episodes, view.sources[0].harness.as_str()),
            (1, "unknown")
        );
        assert!(
            view.problems[0].to_string().contains("corrupt")
                && view.problems[0]
                    .to_string()
                    .contains("harness and agent are unknown"),
            "{:?}",
            view.problems
        );
        std::fs::remove_file(run.join(CONFIG_FILE)).unwrap();
        let view = collect(std::slice::from_ref(&run), 1.0, &FailureFilter::default()).unwrap();
        assert!(
            view.problems[0].to_string().contains("missing"),
            "{:?}",
            view.problems
        );
        // "none" is Direct's name: an unknown harness is not Direct.
        let none = FailureFilter {
            harness: Some("none".into()),
        };
        let err = collect(std::slice::from_ref(&run), 1.0, &none).unwrap_err();
        assert!(
            matches!(&err, ReportError::NoSuchHarness { found, .. } if found == &["unknown"]),
            "{err}"
        );
    }

    #[test]
    fn a_harness_filter_that_matches_nothing_names_the_harnesses_there_are() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        write_run(&run, &[one_line("a")]);
        let direct = FailureFilter {
            harness: Some("none".into()),
        };
        assert_eq!(
            collect(std::slice::from_ref(&run), 1.0, &direct)
                .unwrap()
                .episodes,
            1
        );
        let typo = FailureFilter {
            harness: Some("51bd".into()),
        };
        let err = collect(std::slice::from_ref(&run), 1.0, &typo).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no run of a harness starting with \"51bd\"; the runs read ran: none"
        );
    }

    /// A labeler whose every call fails with `error`, counting its calls.
    struct Failing(
        std::sync::atomic::AtomicU32,
        fn() -> ecdysis_model::ModelError,
    );

    impl ChatModel for Failing {
        fn name(&self) -> &str {
            "failing"
        }
        fn chat<'a>(
            &'a self,
            _request: &'a ecdysis_model::ChatRequest,
        ) -> ecdysis_model::ModelFuture<'a> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let error = (self.1)();
            Box::pin(async move { Err(error) })
        }
    }

    #[test]
    fn an_unreachable_labeler_is_asked_once_not_once_per_failure() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        write_run(&run, &[one_line("a"), one_line("b"), one_line("c")]);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let unreachable = || ecdysis_model::ModelError::Connection {
            endpoint: "http://127.0.0.1:9/v1".into(),
            message: "connection refused".into(),
        };
        let too_long = || ecdysis_model::ModelError::ContextLength {
            endpoint: "http://127.0.0.1:9/v1".into(),
            message: "this failure's excerpt is too long".into(),
        };
        for (error, calls, errors) in [
            (unreachable as fn() -> _, 1, 1),
            // The positive control: a failure of this one request's own
            // (its length) leaves the others to be asked.
            (too_long, 3, 3),
        ] {
            let mut view =
                collect(std::slice::from_ref(&run), 1.0, &FailureFilter::default()).unwrap();
            let model = Failing(0.into(), error);
            rt.block_on(label_with(&mut view, &model, false));
            let llm = view.llm.unwrap();
            assert_eq!(model.0.into_inner(), calls);
            assert_eq!(llm.errors.len(), errors, "{:?}", llm.errors);
            assert_eq!(llm.stopped.is_some(), calls == 1, "{:?}", llm.stopped);
            if let Some(why) = &llm.stopped {
                assert!(why.ends_with("2 more failure(s) not asked"), "{why}");
            }
            assert_eq!(llm.labelled, 0);
            assert_eq!(
                llm.per_group.iter().flatten().count(),
                3,
                "a place per failure"
            );
        }
    }

    #[test]
    fn a_task_recorded_twice_keeps_its_first_line_as_the_runner_does() {
        let tmp = tempfile::tempdir().unwrap();
        let failed = one_line("a");
        let mut solved = episode("a", &[(1, "commit_final_answer", "ok", false)]);
        solved.reward = 1.0;
        solved.success = true;
        let solved = format!("{}\n", serde_json::to_string(&solved).unwrap());
        let run = tmp.path().join("run");
        write_run(&run, &[failed.clone(), solved.clone()]);
        let view = collect(std::slice::from_ref(&run), 1.0, &FailureFilter::default()).unwrap();
        assert_eq!((view.episodes, view.failures), (1, 1));
        write_run(&run, &[solved, failed]);
        let view = collect(std::slice::from_ref(&run), 1.0, &FailureFilter::default()).unwrap();
        assert_eq!((view.episodes, view.failures), (1, 0));
    }

    #[test]
    fn a_file_of_garbage_names_its_first_bad_lines_and_counts_the_rest() {
        let tmp = tempfile::tempdir().unwrap();
        let good = episode(
            "a",
            &[(1, "commit_final_answer", "Final answer committed.", false)],
        );
        let mut lines: Vec<String> = (0..25).map(|i| format!("not json {i}\n")).collect();
        lines.push(format!("{}\n", serde_json::to_string(&good).unwrap()));
        lines.push("\u{1}garbage\n".to_string());
        let run = tmp.path().join("run");
        write_run(&run, &lines);
        let view = collect(std::slice::from_ref(&run), 1.0, &FailureFilter::default()).unwrap();
        assert_eq!(view.episodes, 1, "the readable line is still read");
        assert_eq!(
            view.problems.len(),
            LINE_PROBLEMS_SHOWN + 1,
            "{:?}",
            view.problems
        );
        assert_eq!(view.problems[0].line, Some(1));
        assert_eq!(
            view.problems[LINE_PROBLEMS_SHOWN - 1].line,
            Some(LINE_PROBLEMS_SHOWN)
        );
        let rest = view.problems.last().unwrap().to_string();
        assert!(
            rest.ends_with(
                "trajectories.jsonl: 16 more unreadable line(s), from line 11 on (skipped)"
            ),
            "{rest}"
        );
    }

    #[test]
    fn a_damaged_line_is_named_and_the_rest_is_grouped() {
        let tmp = tempfile::tempdir().unwrap();
        let line = |r: &EpisodeRecord| format!("{}\n", serde_json::to_string(r).unwrap());
        let same_reply = |t| {
            episode(
                t,
                &[
                    (1, "execute_sql", "1064 (42000): You have an error", true),
                    (1, "commit_final_answer", "Final answer committed.", false),
                ],
            )
        };
        let mut lines = vec![line(&same_reply("a")), "{\"task_id\": 3\n".to_string()];
        lines.push(line(&same_reply("b")));
        // A truncated last line, as a killed run leaves it.
        let torn = line(&same_reply("c"));
        lines.push(torn[..torn.len() / 2].to_string());
        let run = tmp.path().join("run");
        write_run(&run, &lines);
        let view = collect(std::slice::from_ref(&run), 1.0, &FailureFilter::default()).unwrap();
        assert_eq!(view.episodes, 2);
        assert_eq!(view.problems.len(), 2, "{:?}", view.problems);
        assert_eq!(view.problems[0].line, Some(2));
        assert_eq!(view.problems[1].line, Some(4));
        assert!(
            view.problems[0]
                .to_string()
                .contains("trajectories.jsonl line 2")
        );
        assert_eq!(view.groups.len(), 1);
        assert!(view.groups[0].recurring);
        let text = render_text(&view);
        assert!(
            text.contains("R1 agent_stop | finishing call in the same reply"),
            "{text}"
        );
        assert!(text.contains("label: realize: rule missing"), "{text}");
        assert!(
            text.contains("last result error mysql 1064: 2 task(s) (a, b)"),
            "{text}"
        );
        assert!(text.contains("[finishes, same reply]"), "{text}");
        let html = render_html(&view);
        assert!(html.contains("<details open>"), "{html}");
        // Not a result directory: an error naming it.
        let empty = tmp.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let err =
            collect(std::slice::from_ref(&empty), 1.0, &FailureFilter::default()).unwrap_err();
        assert!(
            err.to_string().contains(&empty.display().to_string()),
            "{err}"
        );
    }

    #[test]
    fn an_episode_in_two_directories_counts_once_and_the_harness_filter_applies() {
        let tmp = tempfile::tempdir().unwrap();
        let r = episode("a", &[(1, "execute_sql", "[]", false)]);
        let line = format!("{}\n", serde_json::to_string(&r).unwrap());
        write_run(&tmp.path().join("x/evals/one"), std::slice::from_ref(&line));
        write_run(&tmp.path().join("y/evals/one"), &[line]);
        // An experiment-like parent: found under it.
        std::fs::write(tmp.path().join("experiment.json"), "{}").unwrap();
        let view = collect(&[tmp.path().to_path_buf()], 1.0, &FailureFilter::default()).unwrap();
        assert_eq!(view.sources.len(), 2);
        assert_eq!(view.episodes, 1);
        assert_eq!(view.failures, 1);
        // A filter matching none of the runs is an error naming theirs.
        let none = collect(
            &[tmp.path().to_path_buf()],
            1.0,
            &FailureFilter {
                harness: Some("abc".into()),
            },
        )
        .unwrap_err();
        assert!(
            matches!(&none, ReportError::NoSuchHarness { found, .. } if found == &["none"]),
            "{none}"
        );
    }
}

//! The coder-success benchmark: how often a coder's replies become a
//! candidate that builds, replayed from recorded replies, no server needed.
//!
//! A case is one recorded coder conversation: the task (spec, evidence,
//! domain) and the model's replies in order. Each case is replayed through
//! the real coder of its format (the editor's parser, matcher and build
//! check, the table coder's reader, table writer and build check, or the
//! whole-file coder's file choice, block reader and build check) on a
//! fresh copy of the harness source, with a model that answers with the
//! recorded replies and fails once they run out. Editor cases run twice,
//! with exact SEARCH matching (the editor as it was) and with the
//! whitespace-tolerant matcher, so the effect of each change is measured
//! on the same replies.
//!
//! Cases come from a cases file (JSON lines, [`CoderCase`]) or straight from
//! training runs' `rounds/<n>/transcript.json` (each coder run's log holds
//! its replies).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};

use crate::code::{
    Coder, CoderContext, CoderTask, EditorCoder, EditorConfig, TableCoder, WholeFileCoder,
};
use crate::diagnose::change_spec::ChangeSpec;
use crate::train::CoderId;
use ecdysis_model::{ChatModel, ChatRequest, ChatResponse, ErrorClass, ModelError, ModelFuture};
use ecdysis_sandbox::store::Containment;
use ecdysis_sys::fsutil::{PathError, copy_crate};

/// How a recorded coder delivered its change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaseFormat {
    /// Search/replace blocks (the built-in editor).
    Editor,
    /// A JSON list of rule-table edits (the table coder).
    Tables,
    /// The whole new content of one small hook file (the whole-file coder).
    WholeFile,
}

impl CaseFormat {
    /// Every format, in the order reports list them.
    pub const ALL: [CaseFormat; 3] = [Self::Editor, Self::Tables, Self::WholeFile];

    /// The format's name on the command line and in case ids.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Editor => "editor",
            Self::Tables => "tables",
            Self::WholeFile => "whole-file",
        }
    }

    /// The format named `name` (as [`CaseFormat::as_str`] writes it).
    pub fn parse(name: &str) -> Option<CaseFormat> {
        Self::ALL.into_iter().find(|f| f.as_str() == name)
    }
}

/// One recorded coder conversation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CoderCase {
    /// A name for the case (its run and round).
    pub id: String,
    /// Where it was recorded (a run directory, a model and server).
    #[serde(default)]
    pub source: String,
    /// The coder's format.
    pub format: CaseFormat,
    /// The change the coder was asked for.
    pub spec: ChangeSpec,
    /// The evidence it was given, when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    /// The training domain (for the table coder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<CoderContext>,
    /// The model's replies, in order.
    pub replies: Vec<String>,
}

/// The coder a case is replayed through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// The editor, SEARCH text matched exactly.
    EditorExact,
    /// The editor, SEARCH text matched ignoring whitespace when unique.
    EditorTolerant,
    /// The table coder.
    Tables,
    /// The whole-file coder.
    WholeFile,
}

impl Variant {
    /// The variant's name in the report.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EditorExact => "editor (exact match)",
            Self::EditorTolerant => "editor (whitespace-tolerant)",
            Self::Tables => "tables (JSON table edits)",
            Self::WholeFile => "whole-file (one hook file)",
        }
    }

    fn of(format: CaseFormat) -> &'static [Variant] {
        match format {
            CaseFormat::Editor => &[Self::EditorExact, Self::EditorTolerant],
            CaseFormat::Tables => &[Self::Tables],
            CaseFormat::WholeFile => &[Self::WholeFile],
        }
    }
}

/// One case through one variant.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseResult {
    /// The case.
    pub id: String,
    /// The coder it went through.
    pub variant: Variant,
    /// A candidate that builds came out.
    pub built: bool,
    /// Recorded replies the coder read.
    pub calls: usize,
    /// Replies recorded for the case.
    pub recorded: usize,
    /// What happened (the coder's error, or the files changed).
    pub outcome: String,
}

/// The benchmark's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CoderBenchReport {
    /// The harness source the cases were replayed on.
    pub source: PathBuf,
    /// Every case through every variant of its format.
    pub results: Vec<CaseResult>,
}

impl CoderBenchReport {
    /// Per variant: cases, built, share — then a line per case.
    pub fn render(&self) -> String {
        let mut out = format!(
            "coder success, replayed from recorded replies on {}\n",
            self.source.display()
        );
        out += &format!(
            "{:<32} {:>6} {:>6} {:>7} {:>11}\n",
            "coder", "cases", "built", "share", "calls/case"
        );
        for v in [
            Variant::EditorExact,
            Variant::EditorTolerant,
            Variant::Tables,
            Variant::WholeFile,
        ] {
            let rows: Vec<&CaseResult> = self.results.iter().filter(|r| r.variant == v).collect();
            if rows.is_empty() {
                continue;
            }
            let built = rows.iter().filter(|r| r.built).count();
            let calls: usize = rows.iter().map(|r| r.calls).sum();
            out += &format!(
                "{:<32} {:>6} {:>6} {:>6.0}% {:>11.1}\n",
                v.as_str(),
                rows.len(),
                built,
                100.0 * built as f64 / rows.len() as f64,
                calls as f64 / rows.len() as f64
            );
        }
        out += "\n";
        for r in &self.results {
            out += &format!(
                "{:<44} {:<30} {} after {}/{} repl(ies): {}\n",
                r.id,
                r.variant.as_str(),
                if r.built { "BUILT " } else { "failed" },
                r.calls,
                r.recorded,
                r.outcome
            );
        }
        out
    }
}

/// A benchmark that could not run.
#[derive(Debug, thiserror::Error)]
pub enum CoderBenchError {
    /// A cases file or transcript could not be read.
    #[error(transparent)]
    Io(#[from] PathError),
    /// A line of a cases file, or a transcript, is not what it should be.
    #[error("{path}: {message}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong (with the line number for cases files).
        message: String,
    },
}

/// A model that answers with recorded replies, in order.
struct Replay {
    replies: Vec<String>,
    next: AtomicUsize,
}

impl ChatModel for Replay {
    fn name(&self) -> &str {
        "replay"
    }

    fn chat<'a>(&'a self, _request: &'a ChatRequest) -> ModelFuture<'a> {
        let i = self.next.fetch_add(1, Ordering::SeqCst);
        let reply = self.replies.get(i).cloned();
        Box::pin(async move {
            match reply {
                Some(text) => Ok(ChatResponse {
                    content: Some(text),
                    finish_reason: Some("stop".into()),
                    ..ChatResponse::default()
                }),
                None => Err(ModelError::Backend {
                    class: ErrorClass::Request,
                    message: format!("no recorded reply for call {}", i + 1),
                }),
            }
        })
    }
}

/// Options of a benchmark run.
#[derive(Debug, Clone)]
pub struct CoderBenchOptions {
    /// The harness source crate the cases are replayed on (copied).
    pub source: PathBuf,
    /// The folder holding its WIT package (`<source>/../wit`).
    pub wit: PathBuf,
    /// Cargo target directory shared by the builds.
    pub target_dir: PathBuf,
    /// A directory the staging copies are made in (emptied first).
    pub scratch: PathBuf,
    /// How builds are contained.
    pub containment: Containment,
}

/// Replay every case through every variant of its format.
pub async fn run(
    cases: &[CoderCase],
    options: &CoderBenchOptions,
) -> Result<CoderBenchReport, CoderBenchError> {
    let scratch = &options.scratch;
    if scratch.exists() {
        std::fs::remove_dir_all(scratch).map_err(|e| PathError::new("remove", scratch, e))?;
    }
    let staging = scratch.join("harness");
    copy_crate(&options.wit, &scratch.join("wit"))?;
    let mut results = Vec::new();
    for case in cases {
        for &variant in Variant::of(case.format) {
            crate::staging::fresh_copy(&options.source, &staging)?;
            let model = Arc::new(Replay {
                replies: case.replies.clone(),
                next: AtomicUsize::new(0),
            });
            let config = EditorConfig {
                // Every recorded reply may be read.
                max_feedback: case.replies.len().saturating_sub(1) as u32,
                target_dir: Some(options.target_dir.clone()),
                containment: options.containment.clone(),
                tolerant: variant != Variant::EditorExact,
                ..EditorConfig::default()
            };
            let coder: Box<dyn Coder> = match variant {
                Variant::Tables => Box::new(TableCoder::new(model.clone(), config)),
                Variant::WholeFile => Box::new(WholeFileCoder::new(model.clone(), config)),
                Variant::EditorExact | Variant::EditorTolerant => {
                    Box::new(EditorCoder::new(model.clone(), config))
                }
            };
            let mut task = CoderTask::new(case.spec.clone());
            task.notes = case.notes.clone();
            task.context = case.context.clone();
            let (built, outcome) = match coder.implement(&task, &staging).await {
                Ok(o) if o.build_ok => (true, format!("changed {}", o.changed_files.join(", "))),
                Ok(o) => (
                    false,
                    format!("edits to {} did not build", o.changed_files.join(", ")),
                ),
                Err(e) => (false, first_line(&e.to_string())),
            };
            results.push(CaseResult {
                id: case.id.clone(),
                variant,
                built,
                calls: model.next.load(Ordering::SeqCst).min(case.replies.len()),
                recorded: case.replies.len(),
                outcome,
            });
        }
    }
    Ok(CoderBenchReport {
        source: options.source.clone(),
        results,
    })
}

fn first_line(s: &str) -> String {
    let line = s.lines().next().unwrap_or_default();
    if line.chars().count() <= 160 {
        line.to_string()
    } else {
        format!("{}…", line.chars().take(160).collect::<String>())
    }
}

/// How [`record`] asks a live model.
pub struct RecordOptions {
    /// The format the new replies are asked in.
    pub format: CaseFormat,
    /// The model (metered and cached by its hub: a second recording of the
    /// same inputs replays its replies).
    pub model: Arc<dyn ChatModel>,
    /// Follow-up turns allowed.
    pub max_feedback: u32,
    /// Replies constrained to the format's JSON schema (the table coder).
    pub structured: bool,
    /// The coder's other settings (sampling, context budget); the bench's
    /// target directory and containment replace its own.
    pub config: EditorConfig,
    /// The domain of cases recorded without one (`dbbench`, `retail`) and
    /// its tools.
    pub context: Option<CoderContext>,
    /// Told each case's outcome as it finishes (a recording takes minutes
    /// per call on a CPU server).
    pub progress: Option<Progress>,
}

/// A line-by-line progress sink.
pub type Progress = Arc<dyn Fn(&str) + Send + Sync>;

/// What [`record`] produced.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    /// The new conversations, one per distinct input that got a reply.
    pub cases: Vec<CoderCase>,
    /// The cases not asked or with no reply, each with why.
    pub skipped: Vec<(String, String)>,
}

/// Ask a live model the recorded inputs of `cases` (their specs, evidence
/// and domains) again, in `options.format`, with the real coder of that
/// format on a fresh copy of the source; the new conversations as cases
/// (their replies read back from the coder's log), to replay offline.
/// A case whose inputs repeat an earlier one's is not asked again: at a
/// fixed temperature it would be the same conversation.
pub async fn record(
    cases: &[CoderCase],
    bench: &CoderBenchOptions,
    options: &RecordOptions,
) -> Result<Recorded, CoderBenchError> {
    let scratch = bench.scratch.join("record");
    if scratch.exists() {
        std::fs::remove_dir_all(&scratch).map_err(|e| PathError::new("remove", &scratch, e))?;
    }
    let staging = scratch.join("harness");
    copy_crate(&bench.wit, &scratch.join("wit"))?;
    let mut out = Recorded::default();
    let mut asked: Vec<(&CoderCase, Option<CoderContext>)> = Vec::new();
    let tell = |line: String| {
        if let Some(progress) = &options.progress {
            progress(&line);
        }
    };
    for (n, case) in cases.iter().enumerate() {
        let context = case.context.clone().or_else(|| options.context.clone());
        if let Some((earlier, _)) = asked
            .iter()
            .find(|(c, ctx)| c.spec == case.spec && c.notes == case.notes && *ctx == context)
        {
            let why = format!("the same inputs as {}", earlier.id);
            tell(format!(
                "case {}/{}: {}: skipped, {why}",
                n + 1,
                cases.len(),
                case.id
            ));
            out.skipped.push((case.id.clone(), why));
            continue;
        }
        asked.push((case, context.clone()));
        crate::staging::fresh_copy(&bench.source, &staging)?;
        let config = EditorConfig {
            max_feedback: options.max_feedback,
            target_dir: Some(bench.target_dir.clone()),
            containment: bench.containment.clone(),
            structured: options.structured,
            ..options.config.clone()
        };
        let coder: Box<dyn Coder> = match options.format {
            CaseFormat::Tables => Box::new(TableCoder::new(options.model.clone(), config)),
            CaseFormat::Editor => Box::new(EditorCoder::new(options.model.clone(), config)),
            CaseFormat::WholeFile => Box::new(WholeFileCoder::new(options.model.clone(), config)),
        };
        let mut task = CoderTask::new(case.spec.clone());
        task.notes = case.notes.clone();
        task.context = context;
        let (log, how) = match coder.implement(&task, &staging).await {
            Ok(o) if o.build_ok => (o.log, format!("built after {} call(s)", o.attempts)),
            Ok(o) => (o.log, format!("did not build after {} call(s)", o.attempts)),
            Err(e) => (e.log().to_string(), first_line(&e.to_string())),
        };
        tell(format!(
            "case {}/{}: {}: {how}",
            n + 1,
            cases.len(),
            case.id
        ));
        let replies = replies_in_log(&log);
        if replies.is_empty() {
            out.skipped.push((case.id.clone(), how));
            continue;
        }
        out.cases.push(CoderCase {
            id: format!("{} as {}", case.id, options.format.as_str()),
            source: coder.name().to_string(),
            format: options.format,
            spec: case.spec.clone(),
            notes: case.notes.clone(),
            context: task.context.clone(),
            replies,
        });
    }
    Ok(out)
}

/// Cases with the same replies as an earlier one dropped (a run replayed
/// from the response cache repeats its conversations word for word).
pub fn dedup(cases: Vec<CoderCase>) -> Vec<CoderCase> {
    let mut seen = std::collections::BTreeSet::new();
    cases
        .into_iter()
        .filter(|c| seen.insert((c.format.as_str(), c.replies.clone())))
        .collect()
}

/// Read a cases file: one [`CoderCase`] per line (blank lines skipped).
pub fn read_cases(path: &Path) -> Result<Vec<CoderCase>, CoderBenchError> {
    let text = std::fs::read_to_string(path).map_err(|e| PathError::new("read", path, e))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| CoderBenchError::Malformed {
                path: path.to_path_buf(),
                message: format!("line {}: {e}", i + 1),
            })
        })
        .collect()
}

/// The coder conversations of a training round's `transcript.json`: each
/// coder run with a spec becomes a case, its replies read back from the
/// run's log (`call N: reply of M chars` followed by the reply). Replies
/// the log clipped are left out, with the calls after them.
pub fn cases_from_transcript(path: &Path) -> Result<Vec<CoderCase>, CoderBenchError> {
    let bytes = std::fs::read(path).map_err(|e| PathError::new("read", path, e))?;
    let malformed = |message: String| CoderBenchError::Malformed {
        path: path.to_path_buf(),
        message,
    };
    let t: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| malformed(e.to_string()))?;
    let spec: Option<ChangeSpec> = t["discussions"]
        .as_array()
        .and_then(|d| d.iter().rev().find_map(|x| x.get("spec")))
        .or_else(|| t.get("spec"))
        .and_then(|s| serde_json::from_value(s.clone()).ok());
    let mut out = Vec::new();
    for (i, run) in t["coder_runs"].as_array().into_iter().flatten().enumerate() {
        let coder = CoderId::from(run["coder"].as_str().unwrap_or_default());
        let format = match coder {
            CoderId::Tables(_) => CaseFormat::Tables,
            CoderId::Editor(_) => CaseFormat::Editor,
            CoderId::WholeFile(_) => CaseFormat::WholeFile,
            _ => continue,
        };
        let task: Option<CoderTask> = run
            .get("task")
            .and_then(|t| serde_json::from_value(t.clone()).ok());
        // Runs without FDCR keep their spec in rounds.jsonl, not here; the
        // replay needs only the replies, so an empty spec stands in.
        let spec = task
            .as_ref()
            .map(|t| t.spec.clone())
            .or_else(|| spec.clone())
            .unwrap_or_else(|| ChangeSpec {
                failure_patterns: vec![],
                proposed_changes: vec![],
                skills: vec![],
                implementation_notes: "(recorded without its spec)".into(),
            });
        let replies = replies_in_log(run["log"].as_str().unwrap_or_default());
        if replies.is_empty() {
            continue;
        }
        out.push(CoderCase {
            id: format!("{}#{}", path.display(), i + 1),
            source: coder.to_string(),
            format,
            spec,
            notes: task.as_ref().and_then(|t| t.notes.clone()),
            context: task.and_then(|t| t.context),
            replies,
        });
    }
    Ok(out)
}

/// Replies of a coder log, in order, up to the first one that was clipped.
pub fn replies_in_log(log: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = log;
    while let Some(at) = rest.find("call ") {
        rest = &rest[at..];
        let header_end = rest.find('\n').unwrap_or(rest.len());
        let header = &rest[..header_end];
        let len = header
            .split_once(": reply of ")
            .and_then(|(_, r)| r.strip_suffix(" chars"))
            .and_then(|n| n.trim().parse::<usize>().ok());
        let Some(len) = len else {
            rest = &rest[header_end.min(rest.len())..];
            if rest.is_empty() {
                break;
            }
            rest = &rest[1.min(rest.len())..];
            continue;
        };
        let body = &rest[(header_end + 1).min(rest.len())..];
        match body.get(..len) {
            Some(reply) if !reply.contains("… [clipped]") || body[len..].starts_with('\n') => {
                out.push(reply.to_string());
                rest = &body[len..];
            }
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_back_from_a_coder_log() {
        let log = "call 1: reply of 11 chars\nFILE: src/a\n\ncall 1: not applied: x\ncall 2: reply of 5 chars\nabcde\ncall 2: build ok (1.0 s)\n";
        assert_eq!(replies_in_log(log), vec!["FILE: src/a", "abcde"]);
        // A reply the log clipped is not replayed, nor what follows it.
        let clipped =
            "call 1: reply of 5000 chars\naaaa\n… [clipped]\ncall 2: reply of 2 chars\nok\n";
        assert!(replies_in_log(clipped).is_empty());
        assert!(replies_in_log("").is_empty());
    }
}

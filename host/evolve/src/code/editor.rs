//! The built-in editor coder: one conversation with the coder model per
//! round. The model answers with search/replace blocks
//!
//! ```text
//! FILE: src/tables.rs
//! <<<<<<< SEARCH
//! exact lines of the current file
//! =======
//! the lines that replace them
//! >>>>>>> REPLACE
//! ```
//!
//! A reply's blocks are applied all-or-nothing: a block whose SEARCH text
//! does not occur exactly once, or a reply without blocks, goes back to the
//! model as a follow-up turn and nothing of that reply is written. Applied
//! edits are built for `wasm32-wasip2`; compiler errors go back the same way.
//! A block for a file outside `src/` rejects the whole attempt
//! ([`CoderError::OutsideSrc`]) with the crate restored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{
    BuildCheck, Coder, CoderError, CoderFuture, CoderOutcome, CoderTask, Language, SOURCE_BUDGET,
    Snapshot, check_build_async, check_crate, clip_chars, coder_prompt, coder_system_prompt,
    in_coder_area, src_diff,
};
use crate::diagnose::token_budget::{self, ContextBudget, estimate_messages};
use ecdysis_model::{ChatMessage, ChatModel, ChatRequest, SamplingArgs};
use ecdysis_sandbox::store::{Containment, Trust};

const EDITOR_FORMAT: &str = include_str!("../prompts/editor_format.md");
const EDITOR_FORMAT_PYTHON: &str = include_str!("../prompts/editor_format_python.md");

/// Files up to this size are quoted whole in a follow-up turn; longer ones
/// by the regions that matter (around a failed SEARCH, around an error).
const WHOLE_FILE: usize = 24_000;

/// Lines of context around a quoted region.
const REGION_CONTEXT: usize = 12;

/// Settings of the built-in editor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EditorConfig {
    /// Follow-up turns allowed after the first reply (mismatched blocks,
    /// replies without blocks, compiler errors): at most `1 + max_feedback`
    /// model calls per round.
    pub max_feedback: u32,
    /// Cargo target directory shared across staging copies (keeps the
    /// dependency builds warm); `None` builds in the crate's `target/`.
    pub target_dir: Option<PathBuf>,
    /// Sampling parameters of every coder call.
    pub sampling: SamplingArgs,
    /// Enters the response-cache key (distinct rounds that should not replay
    /// each other set distinct salts).
    pub cache_salt: Option<String>,
    /// Most characters of harness source quoted in the first prompt.
    pub source_budget: usize,
    /// Every request (prompt estimate plus reply room) fits this; without
    /// `sampling.max_tokens` the reply room is sent as `max_tokens`.
    pub budget: ContextBudget,
    /// How the build checks of its edits (untrusted source) are contained.
    pub containment: Containment,
    /// Constrain replies to a JSON schema through the endpoint's
    /// `response_format` (the table coder's edit list; the editor's prose
    /// blocks have none).
    pub structured: bool,
    /// A SEARCH text that is not in the file exactly may match its lines
    /// with whitespace ignored, when that match is unique.
    pub tolerant: bool,
}

/// Default [`EditorConfig::max_feedback`] (`--coder-max-feedback`).
pub const DEFAULT_MAX_FEEDBACK: u32 = 3;

impl Default for EditorConfig {
    fn default() -> Self {
        Self {
            max_feedback: DEFAULT_MAX_FEEDBACK,
            target_dir: None,
            sampling: SamplingArgs::default(),
            cache_salt: None,
            source_budget: SOURCE_BUDGET,
            budget: ContextBudget::default(),
            containment: Containment::default(),
            structured: false,
            tolerant: true,
        }
    }
}

impl EditorConfig {
    /// Estimated tokens a follow-up turn (mismatches, compiler errors and
    /// the files quoted back) may take: a fifth of the prompt room.
    pub fn feedback_tokens(&self) -> usize {
        (self.budget.prompt_tokens() / 5).max(400)
    }
}

/// The built-in search/replace editor.
pub struct EditorCoder {
    model: Arc<dyn ChatModel>,
    config: EditorConfig,
    name: String,
}

impl EditorCoder {
    /// An editor driving `model` (named `editor:<model>` in records).
    pub fn new(model: Arc<dyn ChatModel>, config: EditorConfig) -> Self {
        let name = format!("editor:{}", model.name());
        Self {
            model,
            config,
            name,
        }
    }

    /// The editor's settings.
    pub fn config(&self) -> &EditorConfig {
        &self.config
    }
}

/// One search/replace edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditBlock {
    /// The path as the model wrote it.
    pub file: String,
    /// Exact text to find (lines joined by `\n`); empty creates a new file.
    pub search: String,
    /// Text to put in its place.
    pub replace: String,
}

fn marker(line: &str, ch: char, word: &str) -> bool {
    let t = line.trim();
    let n = t.chars().take_while(|&c| c == ch).count();
    n >= 5 && t[n..].trim() == word
}

fn file_line(line: &str) -> Option<String> {
    let t = line.trim().trim_start_matches(['#', '*', ' ']);
    let rest = t
        .strip_prefix("FILE:")
        .or_else(|| t.strip_prefix("File:"))
        .or_else(|| t.strip_prefix("file:"))?;
    let path = rest
        .trim()
        .trim_matches(|c| matches!(c, '`' | '*' | '"' | '\''));
    (!path.is_empty()).then(|| path.to_string())
}

/// A reply's search/replace block that cannot be read, named by its
/// number (from 1) and, once one was named, its file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditsError {
    /// A block comes before any `FILE:` line.
    #[error("block {block} has no `FILE: src/...` line before it")]
    NoFile {
        /// The block's number.
        block: usize,
    },
    /// A block's SEARCH part runs into another marker.
    #[error("block {block} ({file}) has no `=======` line between SEARCH and REPLACE")]
    NoDivider {
        /// The block's number.
        block: usize,
        /// Its file.
        file: String,
    },
    /// The reply ends inside a block.
    #[error("block {block} ({file}) is not closed with `>>>>>>> REPLACE`")]
    Unclosed {
        /// The block's number.
        block: usize,
        /// Its file.
        file: String,
    },
}

/// Read the search/replace blocks of a reply. Text outside blocks (prose,
/// code fences) is ignored; a block must follow a `FILE: <path>` line (which
/// holds for the blocks after it until the next one).
pub fn parse_edits(text: &str) -> Result<Vec<EditBlock>, EditsError> {
    enum State {
        Outside,
        Search(Vec<String>),
        Replace(Vec<String>, Vec<String>),
    }
    let mut blocks = Vec::new();
    let mut file: Option<String> = None;
    let mut state = State::Outside;
    for raw in text.lines() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        state = match state {
            State::Outside => {
                if let Some(f) = file_line(line) {
                    file = Some(f);
                    State::Outside
                } else if marker(line, '<', "SEARCH") {
                    if file.is_none() {
                        return Err(EditsError::NoFile {
                            block: blocks.len() + 1,
                        });
                    }
                    State::Search(Vec::new())
                } else {
                    State::Outside
                }
            }
            State::Search(mut s) => {
                if marker(line, '=', "") {
                    State::Replace(s, Vec::new())
                } else if marker(line, '>', "REPLACE") || marker(line, '<', "SEARCH") {
                    return Err(EditsError::NoDivider {
                        block: blocks.len() + 1,
                        file: file.clone().unwrap_or_else(|| "?".into()),
                    });
                } else {
                    s.push(line.to_string());
                    State::Search(s)
                }
            }
            State::Replace(s, mut r) => {
                if marker(line, '>', "REPLACE") {
                    blocks.push(EditBlock {
                        file: file.clone().unwrap_or_default(),
                        search: s.join("\n"),
                        replace: r.join("\n"),
                    });
                    State::Outside
                } else {
                    r.push(line.to_string());
                    State::Replace(s, r)
                }
            }
        };
    }
    if !matches!(state, State::Outside) {
        return Err(EditsError::Unclosed {
            block: blocks.len() + 1,
            file: file.unwrap_or_else(|| "?".into()),
        });
    }
    Ok(blocks)
}

/// The relative path of an edit, or `None` when it leaves the coder's area
/// (a crate's `src/`, a Python harness's modules: [`in_coder_area`]).
fn allowed_path(staging: &Path, file: &str) -> Option<String> {
    let f = file.trim();
    let f = f.strip_prefix("./").unwrap_or(f);
    if f.starts_with('/') || f.contains('\\') {
        return None;
    }
    let parts: Vec<&str> = f.split('/').collect();
    let python = Language::of(staging) == Language::Python;
    if (!python && parts.len() < 2)
        || !in_coder_area(python, f)
        || parts
            .iter()
            .any(|p| p.is_empty() || *p == "." || *p == "..")
    {
        return None;
    }
    // No component may be a symlink (it could point anywhere).
    let mut p = staging.to_path_buf();
    for part in &parts {
        p.push(part);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
            return None;
        }
    }
    Some(parts.join("/"))
}

enum ApplyError {
    /// Files outside `src/`, as written.
    Outside(Vec<String>),
    /// What went wrong, and the files to show again (with what to show).
    Problems(Vec<String>, Focus),
}

/// Where to look in a file quoted back to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Spot {
    /// Around the region most like this SEARCH text.
    Like(String),
    /// Around this 1-based line.
    Line(usize),
}

/// Files to quote, each with the spots that matter.
type Focus = BTreeMap<String, Vec<Spot>>;

/// [`apply_edits_with`] matching whitespace-tolerantly, as by default.
#[cfg(test)]
fn apply_edits(staging: &Path, blocks: &[EditBlock]) -> Result<Vec<String>, ApplyError> {
    apply_edits_with(staging, blocks, true)
}

/// Apply all blocks in memory, then write them, or nothing; `tolerant`
/// lets a SEARCH text match its lines with whitespace ignored.
fn apply_edits_with(
    staging: &Path,
    blocks: &[EditBlock],
    tolerant: bool,
) -> Result<Vec<String>, ApplyError> {
    let mut outside = Vec::new();
    let mut paths = Vec::new();
    for b in blocks {
        match allowed_path(staging, &b.file) {
            Some(p) => paths.push(p),
            None => {
                if !outside.contains(&b.file) {
                    outside.push(b.file.clone());
                }
            }
        }
    }
    if !outside.is_empty() {
        return Err(ApplyError::Outside(outside));
    }
    let mut files: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut show = Focus::new();
    for (i, (b, path)) in blocks.iter().zip(&paths).enumerate() {
        let n = i + 1;
        let content = files.entry(path.clone()).or_insert_with(|| {
            let p = staging.join(path);
            if p.is_file() {
                Some(std::fs::read_to_string(&p).unwrap_or_else(|_| "\u{0}binary".into()))
            } else {
                None
            }
        });
        let mut problem = |msg: String, path: &String| {
            problems.push(format!("block {n} ({path}): {msg}"));
            let spots = show.entry(path.clone()).or_default();
            if !b.search.trim().is_empty() {
                spots.push(Spot::Like(b.search.clone()));
            }
        };
        if content.as_deref().is_some_and(|c| c.starts_with('\u{0}')) {
            problem("the file is not UTF-8 text".into(), path);
            continue;
        }
        if b.search.trim().is_empty() {
            match content {
                Some(c) if !c.trim().is_empty() => problem(
                    "an empty SEARCH creates a new file, but this file exists; quote the lines to replace".into(),
                    path,
                ),
                _ => {
                    let mut text = b.replace.clone();
                    if !text.ends_with('\n') {
                        text.push('\n');
                    }
                    *content = Some(text);
                }
            }
            continue;
        }
        let Some(text) = content.as_mut() else {
            problem(
                "the file does not exist (to create it, leave SEARCH empty)".into(),
                path,
            );
            continue;
        };
        let count = text.matches(b.search.as_str()).count();
        let loose = || {
            if tolerant {
                loose_match(text, &b.search)
            } else {
                Loose::None
            }
        };
        match count {
            0 => match loose() {
                // Small models re-indent what they copy; a unique match of
                // the same lines, whitespace aside, is what they meant.
                Loose::One(range) => text.replace_range(range, &b.replace),
                Loose::Many(n) => problem(
                    format!("the SEARCH text matches {n} places when whitespace is ignored; add surrounding lines so it is unique"),
                    path,
                ),
                Loose::None => problem(
                    "the SEARCH text does not occur in the file. Copy the lines exactly from the current file below.".into(),
                    path,
                ),
            },
            1 => {
                let at = text.find(b.search.as_str()).unwrap_or(0);
                let mut end = at + b.search.len();
                // Deleting whole lines also deletes their line break.
                if b.replace.is_empty() && text[end..].starts_with('\n') {
                    end += 1;
                }
                text.replace_range(at..end, &b.replace);
            }
            n => problem(
                format!("the SEARCH text occurs {n} times; add surrounding lines so it is unique"),
                path,
            ),
        }
    }
    if !problems.is_empty() {
        return Err(ApplyError::Problems(problems, show));
    }
    let mut written = Vec::new();
    for (path, content) in files {
        let Some(text) = content else { continue };
        let p = staging.join(&path);
        if std::fs::read_to_string(&p).ok().as_deref() == Some(text.as_str()) {
            continue;
        }
        if let Some(parent) = p.parent()
            && let Err(e) = std::fs::create_dir_all(parent)
        {
            return Err(ApplyError::Problems(
                vec![format!("{path}: cannot create its folder: {e}")],
                Focus::new(),
            ));
        }
        if let Err(e) = std::fs::write(&p, text) {
            return Err(ApplyError::Problems(
                vec![format!("{path}: cannot write: {e}")],
                Focus::new(),
            ));
        }
        written.push(path);
    }
    Ok(written)
}

/// Where SEARCH lines occur when whitespace inside and around each line is
/// ignored (blank lines of SEARCH skipped).
enum Loose {
    /// Nowhere.
    None,
    /// Once: the byte range of the file's whole lines that match.
    One(std::ops::Range<usize>),
    /// This many times.
    Many(usize),
}

fn normalized(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn loose_match(text: &str, search: &str) -> Loose {
    let want: Vec<String> = search
        .lines()
        .map(normalized)
        .filter(|l| !l.is_empty())
        .collect();
    if want.is_empty() {
        return Loose::None;
    }
    // Every line with its byte range (line break excluded), blank ones
    // left out so a SEARCH that drops a blank line still matches.
    let mut lines: Vec<(String, usize, usize)> = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let body = line.strip_suffix('\n').unwrap_or(line);
        let n = normalized(body);
        if !n.is_empty() {
            lines.push((n, at, at + body.len()));
        }
        at += line.len();
    }
    let hits: Vec<std::ops::Range<usize>> = lines
        .windows(want.len())
        .filter(|w| w.iter().zip(&want).all(|(l, s)| l.0 == *s))
        .map(|w| w[0].1..w[w.len() - 1].2)
        .collect();
    match hits.len() {
        0 => Loose::None,
        1 => Loose::One(hits[0].clone()),
        n => Loose::Many(n),
    }
}

/// How alike two lines are, 0 to 1: the longer of their common prefix and
/// common suffix over the longer line (a misremembered value or name in the
/// middle or at the end of a line still scores high).
fn similarity(a: &str, b: &str) -> f64 {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let longest = a.len().max(b.len());
    if longest == 0 {
        return 1.0;
    }
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    prefix.max(suffix) as f64 / longest as f64
}

/// 0-based line ranges `[a, b)` of `lines` worth quoting for `spots`,
/// merged.
fn regions(lines: &[&str], spots: &[Spot]) -> Vec<(usize, usize)> {
    let n = lines.len();
    let mut out: Vec<(usize, usize)> = Vec::new();
    for spot in spots {
        let (at, len) = match spot {
            Spot::Line(l) => (l.saturating_sub(1), 1),
            Spot::Like(search) => {
                let want: Vec<&str> = search.lines().map(str::trim).collect();
                let w = want.len().max(1);
                let mut best = (0usize, 0.0f64);
                for i in 0..n {
                    let score: f64 = (0..w.min(n - i))
                        .filter(|&j| !want[j].is_empty())
                        .map(|j| similarity(lines[i + j].trim(), want[j]))
                        .filter(|&s| s >= 0.5)
                        .sum();
                    if score > best.1 {
                        best = (i, score);
                    }
                }
                if best.1 == 0.0 {
                    continue;
                }
                (best.0, w)
            }
        };
        out.push((
            at.saturating_sub(REGION_CONTEXT),
            (at + len + REGION_CONTEXT).min(n),
        ));
    }
    out.sort();
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (a, b) in out {
        match merged.last_mut() {
            Some((_, e)) if a <= *e => *e = (*e).max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

/// The current content of files, whole when short, else by region.
fn quote_files(staging: &Path, focus: &Focus) -> String {
    let lang = Language::of(staging).fence();
    let mut out = String::new();
    for (f, spots) in focus {
        let Ok(text) = std::fs::read_to_string(staging.join(f)) else {
            out += &format!("### {f}\n(does not exist)\n\n");
            continue;
        };
        if text.len() <= WHOLE_FILE {
            out += &format!(
                "### {f}\n```{lang}\n{text}{}```\n\n",
                if text.ends_with('\n') { "" } else { "\n" }
            );
            continue;
        }
        let lines: Vec<&str> = text.lines().collect();
        let mut parts = regions(&lines, spots);
        if parts.is_empty() {
            parts.push((0, lines.len().min(4 * REGION_CONTEXT)));
        }
        for (a, b) in parts {
            out += &format!(
                "### {f}, lines {}-{} of {} (excerpt)\n```{lang}\n{}\n```\n\n",
                a + 1,
                b,
                lines.len(),
                lines[a..b].join("\n")
            );
        }
    }
    out
}

/// `--> src/x.rs:LINE:COL` locations of compiler messages, and
/// `File "…/x.py", line N` ones of a Python traceback (the latter by the
/// file's name among the changed ones), per file.
fn error_spots(errors: &str, changed: &[String]) -> Focus {
    let mut focus: Focus = changed.iter().map(|f| (f.clone(), Vec::new())).collect();
    for line in errors.lines() {
        if let Some((path, n)) = python_location(line)
            && let Some(file) = changed
                .iter()
                .find(|c| path == c.as_str() || path.ends_with(&format!("/{c}")))
        {
            focus.entry(file.clone()).or_default().push(Spot::Line(n));
            continue;
        }
        let Some(loc) = line.trim_start().strip_prefix("--> ") else {
            continue;
        };
        let mut parts = loc.trim().rsplitn(3, ':');
        let (_col, line_no, file) = (parts.next(), parts.next(), parts.next());
        if let (Some(file), Some(Ok(n))) = (file, line_no.map(str::parse::<usize>)) {
            let file = file.trim_start_matches("./").to_string();
            if file.starts_with("src/") {
                focus.entry(file).or_default().push(Spot::Line(n));
            }
        }
    }
    focus
}

/// The file and line of a traceback line `  File "PATH", line N, in f`.
fn python_location(line: &str) -> Option<(&str, usize)> {
    let rest = line.trim_start().strip_prefix("File \"")?;
    let (path, rest) = rest.split_once('"')?;
    let n = rest.strip_prefix(", line ")?;
    let n = n
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some((path, n))
}

fn first_line(s: &str) -> &str {
    s.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}

/// What the editor makes of one reply.
enum Turn {
    /// The edits changed `src/` and the crate builds: the round's outcome.
    Built(CoderOutcome),
    /// Nothing usable yet: what to tell the model in the next turn.
    Feedback(String),
}

/// A coder error that also puts the staging crate back as it was.
fn restoring(before: &Snapshot) -> impl Fn(CoderError) -> CoderError + '_ {
    move |err| {
        if let Err(e) = before.restore() {
            tracing::warn!(error = %e, "could not restore the staging crate");
        }
        err
    }
}

impl EditorCoder {
    async fn run(&self, task: &CoderTask, staging: &Path) -> Result<CoderOutcome, CoderError> {
        check_crate(staging)?;
        let before = Snapshot::take(staging)?;
        let trust = before.untrusted_edits(&self.config.containment);
        let fail = restoring(&before);
        let opening = self.opening(task, staging)?;
        let mut messages = opening.clone();
        let max_calls = 1 + self.config.max_feedback;
        let mut log = String::new();
        let mut attempts = 0u32;
        let mut last_problem: String;
        loop {
            attempts += 1;
            let text = match self.ask(&messages).await {
                Ok(text) => text,
                Err(source) => {
                    log += &format!("call {attempts}: model error: {source}\n");
                    return Err(fail(CoderError::Model {
                        source,
                        attempts,
                        log,
                    }));
                }
            };
            log += &format!(
                "call {attempts}: reply of {} chars\n{}\n",
                text.len(),
                clip_chars(&text, super::LOGGED_REPLY_CHARS)
            );
            let feedback = match self
                .judge(&text, staging, &before, &trust, attempts, &mut log)
                .await
            {
                Ok(Turn::Built(outcome)) => return Ok(outcome),
                Ok(Turn::Feedback(feedback)) => feedback,
                Err(e) => return Err(fail(e)),
            };
            last_problem = first_line(&feedback).to_string();
            if attempts >= max_calls {
                break;
            }
            messages = self.follow_up(&opening, &text, &feedback);
        }
        // Out of turns: keep edits that were applied (the build failed on
        // them), or report that nothing usable came.
        let after = Snapshot::take(staging).map_err(|e| fail(e.into()))?;
        let (diff, changed_files) = src_diff(&before, &after);
        if changed_files.is_empty() {
            return Err(fail(CoderError::NoEdits {
                last: last_problem,
                attempts,
                log,
            }));
        }
        Ok(CoderOutcome {
            diff,
            changed_files,
            attempts,
            build_ok: false,
            log,
        })
    }

    /// The system prompt and the first request. The first prompt leaves
    /// room for one follow-up exchange (the model's last reply and the
    /// feedback on it): only the latest exchange is kept in the
    /// conversation, so every call fits.
    fn opening(&self, task: &CoderTask, staging: &Path) -> Result<Vec<ChatMessage>, CoderError> {
        let budget = self.config.budget;
        let exchange = if self.config.max_feedback > 0 {
            budget.reply_tokens + self.config.feedback_tokens() + 2 * token_budget::MESSAGE_OVERHEAD
        } else {
            0
        };
        let language = Language::of(staging);
        let system = ChatMessage::system(coder_system_prompt(language));
        let too_small = || CoderError::ContextTooSmall {
            context: budget.context_tokens,
            reply: budget.reply_tokens,
        };
        let room = budget
            .prompt_tokens()
            .checked_sub(
                estimate_messages(std::slice::from_ref(&system))
                    + token_budget::MESSAGE_OVERHEAD
                    + exchange,
            )
            .ok_or_else(too_small)?;
        let prompt = coder_prompt(
            task,
            staging,
            match language {
                Language::Rust => EDITOR_FORMAT,
                Language::Python => EDITOR_FORMAT_PYTHON,
            },
            self.config.source_budget,
            Some(room),
        )?
        .ok_or_else(too_small)?;
        Ok(vec![system, ChatMessage::user(prompt)])
    }

    /// One model call; the reply's text.
    async fn ask(&self, messages: &[ChatMessage]) -> Result<String, ecdysis_model::ModelError> {
        let mut sampling = self.config.sampling.clone();
        if sampling.max_tokens.is_none() {
            sampling.max_tokens = Some(self.config.budget.reply_tokens as u32);
        }
        let mut request = ChatRequest::new(messages.to_vec()).with_sampling(sampling);
        request.cache_salt = self.config.cache_salt.clone();
        Ok(self.model.chat(&request).await?.text().to_string())
    }

    /// The next conversation: the opening and the latest exchange only,
    /// each side clipped to its room.
    fn follow_up(&self, opening: &[ChatMessage], reply: &str, feedback: &str) -> Vec<ChatMessage> {
        let mut messages = opening.to_vec();
        messages.push(ChatMessage::assistant(token_budget::clip_lines(
            reply,
            self.config.budget.reply_tokens,
            "reply",
        )));
        messages.push(ChatMessage::user(token_budget::clip_lines(
            feedback,
            self.config.feedback_tokens(),
            "feedback",
        )));
        messages
    }

    /// Read a reply as edits and apply them all or none; edits that change
    /// `src/` are built. Edits outside `src/` end the round (an error).
    async fn judge(
        &self,
        text: &str,
        staging: &Path,
        before: &Snapshot,
        trust: &Trust,
        attempts: u32,
        log: &mut String,
    ) -> Result<Turn, CoderError> {
        let blocks = match parse_edits(text) {
            Err(e) => {
                return Ok(Turn::Feedback(format!(
                    "Your reply could not be read as edits: {e}. Nothing was applied. \
                     Reply again with SEARCH/REPLACE blocks in the format described above."
                )));
            }
            Ok(blocks) if blocks.is_empty() => {
                return Ok(Turn::Feedback(
                    "Your reply contains no SEARCH/REPLACE blocks, so nothing \
                     changed. Implement the spec now, as blocks in the format described above."
                        .to_string(),
                ));
            }
            Ok(blocks) => blocks,
        };
        match apply_edits_with(staging, &blocks, self.config.tolerant) {
            Err(ApplyError::Outside(files)) => {
                *log += &format!(
                    "call {attempts}: edits outside src/: {}\n",
                    files.join(", ")
                );
                Err(CoderError::OutsideSrc {
                    files,
                    attempts,
                    log: log.clone(),
                })
            }
            Err(ApplyError::Problems(problems, show)) => {
                *log += &format!("call {attempts}: not applied: {}\n", problems.join("; "));
                Ok(Turn::Feedback(format!(
                    "None of the edits in your last reply were applied:\n{}\n\n\
                     The current content of the files concerned:\n\n{}\
                     Reply with corrected SEARCH/REPLACE blocks for every edit you \
                     still want (nothing of the last reply was kept).",
                    problems
                        .iter()
                        .map(|p| format!("- {p}"))
                        .collect::<Vec<_>>()
                        .join("\n"),
                    quote_files(staging, &show)
                )))
            }
            Ok(written) => {
                *log += &format!(
                    "call {attempts}: applied {} block(s) to {}\n",
                    blocks.len(),
                    if written.is_empty() {
                        "nothing".into()
                    } else {
                        written.join(", ")
                    }
                );
                self.build_applied(staging, before, trust, attempts, log)
                    .await
            }
        }
    }

    /// After edits were applied: nothing changed, a build that fails (its
    /// errors and the changed files go back to the model), or the outcome.
    async fn build_applied(
        &self,
        staging: &Path,
        before: &Snapshot,
        trust: &Trust,
        attempts: u32,
        log: &mut String,
    ) -> Result<Turn, CoderError> {
        let now = Snapshot::take(staging)?;
        let (diff, changed) = src_diff(before, &now);
        if changed.is_empty() {
            return Ok(Turn::Feedback(
                "After your edits src/ is exactly as it was at the start, so nothing \
                 would change. Implement the spec with SEARCH/REPLACE blocks."
                    .to_string(),
            ));
        }
        let build: BuildCheck =
            check_build_async(staging, self.config.target_dir.as_deref(), trust).await?;
        if build.ok {
            *log += &format!("call {attempts}: build ok ({:.1} s)\n", build.seconds);
            return Ok(Turn::Built(CoderOutcome {
                diff,
                changed_files: changed,
                attempts,
                build_ok: true,
                log: log.clone(),
            }));
        }
        *log += &format!(
            "call {attempts}: build failed ({:.1} s): {}\n",
            build.seconds,
            first_line(&build.errors)
        );
        Ok(Turn::Feedback(format!(
            "Your edits were applied, but the crate does not build for \
             wasm32-wasip2:\n\n```text\n{}\n```\n\nThe files changed so far now read:\n\n{}\
             Reply with SEARCH/REPLACE blocks against this current content that \
             fix the errors.",
            build.errors.trim_end(),
            quote_files(staging, &error_spots(&build.errors, &changed))
        )))
    }
}

impl Coder for EditorCoder {
    fn name(&self) -> &str {
        &self.name
    }

    fn implement<'a>(&'a self, task: &'a CoderTask, staging: &'a Path) -> CoderFuture<'a> {
        Box::pin(self.run(task, staging))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPLY: &str = "I will add the hint.\n\
        FILE: src/tables.rs\n\
        ```rust\n\
        <<<<<<< SEARCH\n\
        pub const A: u32 = 1;\n\
        =======\n\
        pub const A: u32 = 2;\n\
        >>>>>>> REPLACE\n\
        ```\n\
        FILE: `src/new.rs`\n\
        <<<<<<< SEARCH\n\
        =======\n\
        pub fn f() {}\n\
        >>>>>>> REPLACE\n";

    #[test]
    fn blocks_parse_with_fences_and_file_lines() {
        let blocks = parse_edits(REPLY).unwrap();
        assert_eq!(
            blocks,
            vec![
                EditBlock {
                    file: "src/tables.rs".into(),
                    search: "pub const A: u32 = 1;".into(),
                    replace: "pub const A: u32 = 2;".into(),
                },
                EditBlock {
                    file: "src/new.rs".into(),
                    search: "".into(),
                    replace: "pub fn f() {}".into(),
                },
            ]
        );
        assert!(parse_edits("no edits here").unwrap().is_empty());
    }

    #[test]
    fn malformed_blocks_are_reported() {
        assert!(
            parse_edits("<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE")
                .unwrap_err()
                .to_string()
                .contains("FILE")
        );
        assert!(
            parse_edits("FILE: src/a.rs\n<<<<<<< SEARCH\na\n=======\nb\n")
                .unwrap_err()
                .to_string()
                .contains("not closed")
        );
        assert!(
            parse_edits("FILE: src/a.rs\n<<<<<<< SEARCH\na\n>>>>>>> REPLACE")
                .unwrap_err()
                .to_string()
                .contains("=======")
        );
    }

    #[test]
    fn long_files_are_quoted_around_what_matters() {
        let text: String = (1..=3000)
            .map(|i| format!("    let v{i} = {i};\n"))
            .collect();
        let lines: Vec<&str> = text.lines().collect();
        // The region most like a mismatched SEARCH (indentation and a
        // value differ).
        let r = regions(
            &lines,
            &[Spot::Like("let v1500 = 1500;\nlet v1501 = 0;".into())],
        );
        assert_eq!(r, vec![(1499 - REGION_CONTEXT, 1501 + REGION_CONTEXT)]);
        let r = regions(&lines, &[Spot::Like("    let v2500 = 7;".into())]);
        assert_eq!(r, vec![(2499 - REGION_CONTEXT, 2500 + REGION_CONTEXT)]);
        assert!(regions(&lines, &[Spot::Like("fn nothing_like_it() {}".into())]).is_empty());
        // Error lines, merged when close.
        let r = regions(&lines, &[Spot::Line(10), Spot::Line(15), Spot::Line(2000)]);
        assert_eq!(
            r,
            vec![
                (0, 15 + REGION_CONTEXT),
                (1999 - REGION_CONTEXT, 2000 + REGION_CONTEXT)
            ]
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/big.rs"), &text).unwrap();
        let errors = "error[E0308]: mismatched types\n  --> src/big.rs:2000:17\n";
        let focus = error_spots(errors, &["src/big.rs".to_string()]);
        assert_eq!(focus["src/big.rs"], vec![Spot::Line(2000)]);
        let quoted = quote_files(dir.path(), &focus);
        assert!(quoted.contains("lines 1988-2012 of 3000"), "{quoted}");
        assert!(quoted.contains("let v2000 = 2000;"));
        assert!(!quoted.contains("let v100 = 100;"));
    }

    #[test]
    fn paths_must_stay_under_src() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::os::unix::fs::symlink("/tmp", root.join("src/out")).unwrap();
        assert_eq!(allowed_path(root, "src/a.rs").as_deref(), Some("src/a.rs"));
        assert_eq!(
            allowed_path(root, "./src/x/b.rs").as_deref(),
            Some("src/x/b.rs")
        );
        for bad in [
            "Cargo.toml",
            "src",
            "src/../Cargo.toml",
            "/etc/passwd",
            "../x/src/a.rs",
            "src//a.rs",
            "src/out/x.rs",
            "build.rs",
        ] {
            assert_eq!(allowed_path(root, bad), None, "{bad}");
        }
    }

    #[test]
    fn a_search_reindented_by_the_model_still_applies_when_unique() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        let file = "pub static T: &[R] = &[\n    R {\n        a: \"x\",\n    },\n\n    R { a: \"y\" },\n];\n";
        std::fs::write(root.join("src/t.rs"), file).unwrap();
        let edit = EditBlock {
            file: "src/t.rs".into(),
            // Indentation lost, the blank line dropped, a trailing space.
            search: "R {\na: \"x\",\n},\nR { a: \"y\" }, ".into(),
            replace: "    R { a: \"z\" },".into(),
        };
        assert_eq!(
            apply_edits(root, &[edit]).ok(),
            Some(vec!["src/t.rs".into()])
        );
        assert_eq!(
            std::fs::read_to_string(root.join("src/t.rs")).unwrap(),
            "pub static T: &[R] = &[\n    R { a: \"z\" },\n];\n"
        );
        // Lines that are not in the file still fail, naming the file.
        let wrong = EditBlock {
            file: "src/t.rs".into(),
            search: "R { a: \"q\" },".into(),
            replace: String::new(),
        };
        let Err(ApplyError::Problems(p, _)) = apply_edits(root, &[wrong]) else {
            panic!("expected problems")
        };
        assert!(p[0].contains("does not occur"), "{p:?}");
    }

    #[test]
    fn edits_apply_all_or_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/a.rs"), "one\ntwo\nthree\ntwo\n").unwrap();
        let block = |search: &str, replace: &str| EditBlock {
            file: "src/a.rs".into(),
            search: search.into(),
            replace: replace.into(),
        };
        // The second block fails: the first is not written either.
        let Err(ApplyError::Problems(p, show)) =
            apply_edits(root, &[block("one", "uno"), block("nine", "x")])
        else {
            panic!("expected problems")
        };
        assert!(
            p[0].contains("block 2") && p[0].contains("does not occur"),
            "{p:?}"
        );
        assert_eq!(show.keys().collect::<Vec<_>>(), vec!["src/a.rs"]);
        assert_eq!(show["src/a.rs"], vec![Spot::Like("nine".into())]);
        let Err(ApplyError::Problems(p, _)) = apply_edits(root, &[block("two", "x")]) else {
            panic!("expected problems")
        };
        assert!(p[0].contains("2 times"), "{p:?}");
        let Err(ApplyError::Problems(p, _)) = apply_edits(root, &[block("  two", "x")]) else {
            panic!("expected problems")
        };
        assert!(
            p[0].contains("2 places when whitespace is ignored"),
            "{p:?}"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("src/a.rs")).unwrap(),
            "one\ntwo\nthree\ntwo\n"
        );
        // Sequential blocks compose; deleting a line takes its break along.
        let written = apply_edits(
            root,
            &[
                block("one\ntwo", "uno\ndos"),
                block("three", ""),
                block("dos\ntwo", "dos"),
            ],
        )
        .ok()
        .unwrap();
        assert_eq!(written, vec!["src/a.rs"]);
        assert_eq!(
            std::fs::read_to_string(root.join("src/a.rs")).unwrap(),
            "uno\ndos\n"
        );
        let Err(ApplyError::Outside(files)) = apply_edits(
            root,
            &[
                block("uno", "x"),
                EditBlock {
                    file: "Cargo.toml".into(),
                    search: "a".into(),
                    replace: "b".into(),
                },
            ],
        ) else {
            panic!("expected outside")
        };
        assert_eq!(files, vec!["Cargo.toml"]);
        assert_eq!(
            std::fs::read_to_string(root.join("src/a.rs")).unwrap(),
            "uno\ndos\n"
        );
    }

    #[test]
    fn a_python_harness_allows_its_modules_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("hooks.py"), "").unwrap();
        std::fs::create_dir_all(root.join("tests")).unwrap();
        for ok in ["tables.py", "./rules.py", "pkg/extra.py"] {
            assert_eq!(
                allowed_path(root, ok).as_deref(),
                Some(ok.trim_start_matches("./")),
                "{ok}"
            );
        }
        for bad in [
            "README.md",
            "tests/test_rules.py",
            "../x.py",
            "/etc/x.py",
            "src/a.rs",
        ] {
            assert_eq!(allowed_path(root, bad), None, "{bad}");
        }
    }

    #[test]
    fn python_tracebacks_point_at_the_changed_module() {
        let errors = "Traceback (most recent call last):\n  File \"/tmp/stage/tables.py\", line 12, in <module>\nSyntaxError: invalid syntax\n";
        let focus = error_spots(errors, &["tables.py".to_string()]);
        assert_eq!(focus["tables.py"], vec![Spot::Line(12)]);
        assert_eq!(
            python_location("  File \"x.py\", line 3"),
            Some(("x.py", 3))
        );
        assert_eq!(python_location("File x.py line 3"), None);
    }
}

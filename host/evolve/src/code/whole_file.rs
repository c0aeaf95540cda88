//! The whole-file coder: the model is shown the spec and ONE small hook
//! file, and answers with that file's complete new content in one fenced
//! block. Public edit benchmarks find this the format small models get
//! right most often: there is no SEARCH text to reproduce exactly, no
//! JSON to fit a schema, only the file to write out again.
//!
//! The host, not the model, picks the file ([`choose_target`]): a file the
//! spec names when it is under the size cap, else a file of a layer the
//! spec names, the one whose name shares most words with the spec first,
//! then the smallest. The cap keeps the reply short enough for a small
//! model to write out whole. The reply is written over the file and the
//! crate is built; a reply with no block, several blocks, an unclosed
//! block or a file over the cap ([`ReplyError`]) and compiler errors go
//! back to the model as follow-up turns, like the other coders'.

use std::path::Path;
use std::sync::Arc;

use super::editor::EditorConfig;
use super::tables::RESAMPLE_TEMPERATURE;
use super::{
    Coder, CoderError, CoderFuture, CoderOutcome, CoderTask, Language, Snapshot, check_build_async,
    check_crate, clip_chars, fill_template, src_diff,
};
use crate::diagnose::change_spec::ChangeSpec;
use crate::diagnose::token_budget::{
    self, ContextBudget, Section, estimate_messages, estimate_tokens,
};
use ecdysis_model::{ChatMessage, ChatModel, ChatRequest};

const SYSTEM: &str = include_str!("../prompts/wholefile_system.md");
const TASK: &str = include_str!("../prompts/wholefile_task.md");

/// Default of the largest file, in bytes, the coder is given (and may
/// answer with).
pub const DEFAULT_FILE_CAP: usize = 5_000;

/// Most characters of compiler output quoted back to the model.
const FEEDBACK_ERROR_CHARS: usize = 1_500;

/// The file a whole-file coder rewrites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetFile {
    /// Its path relative to the crate (`src/…`).
    pub path: String,
    /// Its current content.
    pub text: String,
}

/// Why no file could be chosen for a spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// The spec proposes no change, so it names neither a file nor a layer.
    #[error("the spec proposes no change (no file or layer named), so there is no file to rewrite")]
    NoChangeProposed,
    /// Every file the spec names, and every file of the layers it names, is
    /// over the cap (or there is none).
    #[error(
        "no file of {} (named by the spec: {}) is at most {cap} bytes",
        .layers.join(", "),
        list_or_none(.files)
    )]
    NothingUnderCap {
        /// The layers' directories searched.
        layers: Vec<String>,
        /// The files the spec named.
        files: Vec<String>,
        /// The cap, in bytes.
        cap: usize,
    },
}

/// The names, comma-separated, or `none`.
fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// Why a reply is not one whole file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// No fenced code block at all.
    #[error("the reply has no code block (a block opened and closed by a line of ```)")]
    NoBlock,
    /// More than one block: which one is the file is a guess.
    #[error("the reply has {count} code blocks; one block holding the whole file is expected")]
    SeveralBlocks {
        /// Blocks found.
        count: usize,
    },
    /// A block opened and never closed: the reply was cut off.
    #[error(
        "the code block opened on line {line} of the reply is never closed (cut off at the reply's length limit?)"
    )]
    Unclosed {
        /// The reply's line (from 1) that opens it.
        line: usize,
    },
    /// The file in the block is over the cap.
    #[error("the file in the reply has {bytes} bytes, over the cap of {cap}")]
    OverCap {
        /// Its size.
        bytes: usize,
        /// The cap.
        cap: usize,
    },
    /// The block holds nothing.
    #[error("the code block is empty")]
    Empty,
}

/// The file content of a whole-file reply: the one fenced block's lines,
/// ending with a newline. A fence is a line of three or more backticks
/// (after up to three spaces, as in Markdown), closed by a line of at least
/// as many backticks and nothing else, so a file may hold shorter fences
/// of its own.
pub fn parse_whole_file(reply: &str, cap: usize) -> Result<String, ReplyError> {
    let mut blocks: Vec<String> = Vec::new();
    let mut open: Option<(usize, usize, String)> = None;
    for (i, line) in reply.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let ticks = trimmed.chars().take_while(|c| *c == '`').count();
        match &mut open {
            None => {
                if indent <= 3 && ticks >= 3 {
                    open = Some((i + 1, ticks, String::new()));
                }
            }
            Some((_, width, body)) => {
                if ticks >= *width && trimmed.trim_end().chars().all(|c| c == '`') {
                    blocks.push(std::mem::take(body));
                    open = None;
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    if let Some((line, _, _)) = open {
        return Err(ReplyError::Unclosed { line });
    }
    match blocks.len() {
        0 => Err(ReplyError::NoBlock),
        1 => {
            let file = blocks.remove(0);
            if file.trim().is_empty() {
                Err(ReplyError::Empty)
            } else if file.len() > cap {
                Err(ReplyError::OverCap {
                    bytes: file.len(),
                    cap,
                })
            } else {
                Ok(file)
            }
        }
        count => Err(ReplyError::SeveralBlocks { count }),
    }
}

/// The words of a file's name (`finish_after_error.rs`: finish, after,
/// error) of four letters or more, so `mod` or `id` match nothing by
/// chance.
fn name_words(path: &str) -> Vec<String> {
    let stem = path
        .rsplit('/')
        .next()
        .unwrap_or(path)
        .split('.')
        .next()
        .unwrap_or_default();
    stem.split(['_', '-'])
        .filter(|w| w.len() >= 4)
        .map(str::to_lowercase)
        .collect()
}

/// The file the spec's change targets, at most `cap` bytes: the smallest
/// file the spec names that fits, else, among the files of the layers the
/// spec names (in `tree`, the coder's area), the one whose name shares
/// most words with the spec, then the smallest. A smallest-only choice
/// picks a layer's `mod.rs` or an unrelated helper whenever the file the
/// spec means is a little larger.
pub fn choose_target(
    tree: &super::diff::Tree,
    spec: &ChangeSpec,
    cap: usize,
) -> Result<TargetFile, TargetError> {
    if spec.proposed_changes.is_empty() {
        return Err(TargetError::NoChangeProposed);
    }
    let text_of = |p: &str| {
        tree.get(p)
            .and_then(|b| std::str::from_utf8(b).ok())
            .map(str::to_string)
    };
    let named: Vec<String> = spec
        .proposed_changes
        .iter()
        .map(|c| c.file.trim_start_matches("./").to_string())
        .collect();
    let mut fitting: Vec<(&String, usize)> = named
        .iter()
        .filter_map(|f| tree.get_key_value(f.as_str()))
        .filter(|(_, b)| b.len() <= cap)
        .map(|(p, b)| (p, b.len()))
        .collect();
    fitting.sort_by_key(|(p, n)| (*n, (*p).clone()));
    if let Some((p, _)) = fitting.first()
        && let Some(text) = text_of(p)
    {
        return Ok(TargetFile {
            path: (*p).clone(),
            text,
        });
    }
    let mut layers: Vec<&'static str> = Vec::new();
    for c in &spec.proposed_changes {
        let dir = crate::diagnose::fdcr::layer_dir(c.layer);
        if !layers.contains(&dir) {
            layers.push(dir);
        }
    }
    let spec_text = serde_json::to_string(spec)
        .unwrap_or_default()
        .to_lowercase();
    let mut candidates: Vec<(usize, usize, &String)> = tree
        .iter()
        .filter(|(p, b)| {
            b.len() <= cap
                && layers.iter().any(|d| p.starts_with(d))
                && std::str::from_utf8(b).is_ok()
        })
        .map(|(p, b)| {
            let hits = name_words(p)
                .iter()
                .filter(|w| spec_text.contains(w.as_str()))
                .count();
            (hits, b.len(), p)
        })
        .collect();
    candidates.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(b.2)));
    match candidates
        .first()
        .and_then(|(_, _, p)| Some(((*p).clone(), text_of(p)?)))
    {
        Some((path, text)) => Ok(TargetFile { path, text }),
        None => Err(TargetError::NothingUnderCap {
            layers: layers.iter().map(|d| d.to_string()).collect(),
            files: named,
            cap,
        }),
    }
}

/// The whole-file coder.
pub struct WholeFileCoder {
    model: Arc<dyn ChatModel>,
    config: EditorConfig,
    cap: usize,
    name: String,
}

impl WholeFileCoder {
    /// A whole-file coder driving `model` (named `whole-file:<model>` in
    /// records), with the default cap.
    pub fn new(model: Arc<dyn ChatModel>, config: EditorConfig) -> Self {
        let name = format!("whole-file:{}", model.name());
        Self {
            model,
            config,
            cap: DEFAULT_FILE_CAP,
            name,
        }
    }

    /// Set the largest file, in bytes, it is given and may answer with.
    pub fn with_cap(mut self, cap: usize) -> Self {
        self.cap = cap;
        self
    }

    /// Reply tokens a whole file of `text` needs, with room for it to grow
    /// by a quarter and a sentence before the block.
    fn reply_tokens_for(text: &str) -> usize {
        estimate_tokens(text) * 5 / 4 + 96
    }

    async fn run(&self, task: &CoderTask, staging: &Path) -> Result<CoderOutcome, CoderError> {
        check_crate(staging)?;
        let before = Snapshot::take(staging)?;
        let trust = before.untrusted_edits(&self.config.containment);
        let target = choose_target(&before.src_tree(), &task.spec, self.cap)
            .map_err(CoderError::WholeFile)?;
        let language = Language::of(staging);
        let reply_tokens = self
            .config
            .budget
            .reply_tokens
            .max(Self::reply_tokens_for(&target.text));
        let budget = ContextBudget {
            context_tokens: self.config.budget.context_tokens,
            reply_tokens,
        };
        let opening = self.opening(task, &target, language, budget)?;
        let mut log = format!(
            "target: {} ({} bytes, cap {})\n",
            target.path,
            target.text.len(),
            self.cap
        );
        let mut messages = opening.clone();
        let mut last = String::new();
        let mut replies: Vec<String> = Vec::new();
        let mut resample = false;
        let max_calls = 1 + self.config.max_feedback;
        let file_path = staging.join(&target.path);
        for attempt in 1..=max_calls {
            let text = match self.ask(&messages, reply_tokens, resample).await {
                Ok(t) => t,
                Err(source) => {
                    log += &format!("call {attempt}: model error: {source}\n");
                    before.restore()?;
                    return Err(CoderError::Model {
                        source,
                        attempts: attempt,
                        log,
                    });
                }
            };
            log += &format!(
                "call {attempt}: reply of {} chars\n{}\n",
                text.len(),
                clip_chars(&text, super::LOGGED_REPLY_CHARS)
            );
            if !resample && let Some(earlier) = replies.iter().position(|r| *r == text) {
                resample = true;
                log += &format!(
                    "call {attempt}: the same reply as call {}; the next calls sample at temperature {RESAMPLE_TEMPERATURE} or more\n",
                    earlier + 1
                );
            }
            replies.push(text.clone());
            let feedback = match parse_whole_file(&text, self.cap) {
                Err(problem) => {
                    log += &format!("call {attempt}: not usable: {problem}\n");
                    format!(
                        "Your reply could not be used: {problem}. Nothing was changed. Reply again with the complete new content of `{}` in one code block.",
                        target.path
                    )
                }
                Ok(file) if file.trim_end() == target.text.trim_end() => {
                    log += &format!("call {attempt}: the file is unchanged\n");
                    format!(
                        "Your file is the same as the current `{}`, so nothing changed. Make the change the spec asks for.",
                        target.path
                    )
                }
                Ok(file) => {
                    std::fs::write(&file_path, &file)
                        .map_err(|e| ecdysis_sys::fsutil::PathError::new("write", &file_path, e))?;
                    let build =
                        check_build_async(staging, self.config.target_dir.as_deref(), &trust)
                            .await?;
                    if build.ok {
                        log += &format!(
                            "call {attempt}: {} rewritten ({} bytes), build ok ({:.1} s)\n",
                            target.path,
                            file.len(),
                            build.seconds
                        );
                        let after = Snapshot::take(staging)?;
                        let (diff, changed_files) = src_diff(&before, &after);
                        return Ok(CoderOutcome {
                            diff,
                            changed_files,
                            attempts: attempt,
                            build_ok: true,
                            log,
                        });
                    }
                    before.restore()?;
                    log += &format!(
                        "call {attempt}: build failed: {}\n",
                        clip_chars(&build.errors, 400)
                    );
                    format!(
                        "Your file was written, but the harness did not build:\n{}\nNothing was kept. Reply again with the complete corrected content of `{}` in one code block.",
                        clip_chars(&build.errors, FEEDBACK_ERROR_CHARS),
                        target.path
                    )
                }
            };
            last = feedback.clone();
            messages = opening.clone();
            messages.push(ChatMessage::assistant(text));
            messages.push(ChatMessage::user(feedback));
        }
        before.restore()?;
        Err(CoderError::NoEdits {
            last: last.lines().next().unwrap_or_default().to_string(),
            attempts: max_calls,
            log,
        })
    }

    /// The system prompt and the task: the spec (clipped to what the
    /// budget leaves) and the whole target file, with room for one
    /// follow-up exchange (the previous reply and the compiler's errors).
    fn opening(
        &self,
        task: &CoderTask,
        target: &TargetFile,
        language: Language,
        budget: ContextBudget,
    ) -> Result<Vec<ChatMessage>, CoderError> {
        let too_small = || CoderError::ContextTooSmall {
            context: budget.context_tokens,
            reply: budget.reply_tokens,
        };
        let system = ChatMessage::system(fill_template(
            SYSTEM.trim(),
            &[("language", language.name())],
        ));
        let exchange = if self.config.max_feedback > 0 {
            budget.reply_tokens
                + estimate_tokens(&"x".repeat(FEEDBACK_ERROR_CHARS))
                + 120
                + 2 * token_budget::MESSAGE_OVERHEAD
        } else {
            0
        };
        let fence = fence_for(&target.text);
        let file_block = format!(
            "{fence}{}\n{}{}{fence}",
            language.fence(),
            target.text,
            if target.text.ends_with('\n') {
                ""
            } else {
                "\n"
            }
        );
        let cap = self.cap.to_string();
        let fill = |spec: &str| {
            fill_template(
                TASK,
                &[
                    ("spec", spec),
                    ("path", &target.path),
                    ("file", &file_block),
                    ("fence", language.fence()),
                    ("cap", &cap),
                ],
            )
        };
        let room = budget
            .prompt_tokens()
            .checked_sub(
                estimate_messages(std::slice::from_ref(&system))
                    + token_budget::MESSAGE_OVERHEAD
                    + exchange
                    + estimate_tokens(&fill(""))
                    + 16,
            )
            .ok_or_else(too_small)?;
        let spec = Section::text(
            serde_json::to_string_pretty(&task.spec).unwrap_or_default(),
            "spec",
        );
        let parts = token_budget::fit_sections(&[&spec], room);
        Ok(vec![system, ChatMessage::user(fill(&parts[0]))])
    }

    /// One call, asking for at least the reply room a whole file needs;
    /// `resample` raises the temperature to at least
    /// [`RESAMPLE_TEMPERATURE`].
    async fn ask(
        &self,
        messages: &[ChatMessage],
        reply_tokens: usize,
        resample: bool,
    ) -> Result<String, ecdysis_model::ModelError> {
        let mut sampling = self.config.sampling.clone();
        if resample {
            let t = sampling
                .temperature
                .unwrap_or(0.0)
                .max(RESAMPLE_TEMPERATURE);
            sampling.temperature = Some(t);
        }
        // A reply cut off before the block closes is wasted: the room is
        // never below what the file needs, whatever the sampling says.
        let needed = u32::try_from(reply_tokens).unwrap_or(u32::MAX);
        sampling.max_tokens = Some(sampling.max_tokens.map_or(needed, |m| m.max(needed)));
        let mut request = ChatRequest::new(messages.to_vec()).with_sampling(sampling);
        request.cache_salt = self.config.cache_salt.clone();
        Ok(self.model.chat(&request).await?.text().to_string())
    }
}

/// A fence longer than any run of backticks opening a line of `text`, so
/// the file's own fences stay inside the block.
fn fence_for(text: &str) -> String {
    let longest = text
        .lines()
        .map(|l| l.trim_start().chars().take_while(|c| *c == '`').count())
        .max()
        .unwrap_or(0);
    "`".repeat(longest.max(2) + 1)
}

impl Coder for WholeFileCoder {
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
    use crate::diagnose::change_spec::{Layer, ProposedChange};

    fn change(layer: Layer, file: &str, description: &str) -> ProposedChange {
        ProposedChange {
            layer,
            file: file.into(),
            description: description.into(),
            rationale: "r".into(),
            evidence_tasks: vec![],
            rule: None,
            instance_specific: false,
        }
    }

    fn spec(changes: Vec<ProposedChange>) -> ChangeSpec {
        ChangeSpec {
            failure_patterns: vec![],
            proposed_changes: changes,
            skills: vec![],
            implementation_notes: String::new(),
        }
    }

    fn tree(files: &[(&str, usize)]) -> super::super::diff::Tree {
        files
            .iter()
            .map(|(p, n)| (p.to_string(), vec![b'x'; *n]))
            .collect()
    }

    #[test]
    fn one_block_is_the_file() {
        let reply = "Here is the file:\n```rust\nfn a() {}\n\nfn b() {}\n```\n";
        assert_eq!(
            parse_whole_file(reply, 100).unwrap(),
            "fn a() {}\n\nfn b() {}\n"
        );
        // A longer fence keeps the file's own shorter fences inside.
        let nested = "````rust\nconst MD: &str = \"\n```sh\nls\n```\n\";\n````";
        assert_eq!(
            parse_whole_file(nested, 100).unwrap(),
            "const MD: &str = \"\n```sh\nls\n```\n\";\n"
        );
    }

    #[test]
    fn replies_that_are_not_one_whole_file_say_why() {
        assert_eq!(
            parse_whole_file("I would add a function.", 100),
            Err(ReplyError::NoBlock)
        );
        assert_eq!(
            parse_whole_file("```rust\nfn a() {}\n```\nand\n```rust\nfn b() {}\n```", 100),
            Err(ReplyError::SeveralBlocks { count: 2 })
        );
        assert_eq!(
            parse_whole_file("text\n```rust\nfn a() {\n", 100),
            Err(ReplyError::Unclosed { line: 2 })
        );
        assert_eq!(
            parse_whole_file("```rust\n\n```", 100),
            Err(ReplyError::Empty)
        );
        let big = format!("```rust\n{}\n```", "x".repeat(120));
        assert_eq!(
            parse_whole_file(&big, 100),
            Err(ReplyError::OverCap {
                bytes: 121,
                cap: 100
            })
        );
        assert!(
            ReplyError::OverCap {
                bytes: 121,
                cap: 100
            }
            .to_string()
            .contains("121 bytes, over the cap of 100")
        );
    }

    #[test]
    fn the_named_file_is_chosen_when_it_fits() {
        let t = tree(&[
            ("src/contract/clock.rs", 2_000),
            ("src/contract/mod.rs", 800),
            ("src/tables.rs", 60_000),
        ]);
        let s = spec(vec![change(Layer::Contract, "src/contract/clock.rs", "d")]);
        assert_eq!(
            choose_target(&t, &s, 5_000).unwrap().path,
            "src/contract/clock.rs"
        );
        // Over the cap: the layer's files instead, the smallest when no
        // name matches the spec.
        assert_eq!(
            choose_target(&t, &s, 1_000).unwrap().path,
            "src/contract/mod.rs"
        );
    }

    #[test]
    fn a_layer_file_named_like_the_spec_beats_a_smaller_one() {
        let t = tree(&[
            ("src/realize/json_arguments.rs", 1_600),
            ("src/realize/finish_after_error.rs", 4_400),
            ("src/realize/finish_hold.rs", 6_700),
            ("src/regulate/budget.rs", 100),
            ("src/tables.rs", 60_000),
        ]);
        let s = spec(vec![change(
            Layer::Realize,
            "src/tables.rs",
            "Refuse a finishing call right after an error",
        )]);
        assert_eq!(
            choose_target(&t, &s, 5_000).unwrap().path,
            "src/realize/finish_after_error.rs"
        );
        // Under a smaller cap only the unrelated file is left.
        assert_eq!(
            choose_target(&t, &s, 2_000).unwrap().path,
            "src/realize/json_arguments.rs"
        );
    }

    #[test]
    fn no_file_to_choose_is_a_typed_error_naming_what_was_searched() {
        let t = tree(&[("src/realize/big.rs", 9_000), ("src/tables.rs", 60_000)]);
        assert_eq!(
            choose_target(&t, &spec(vec![]), 5_000),
            Err(TargetError::NoChangeProposed)
        );
        let err = choose_target(
            &t,
            &spec(vec![change(Layer::Realize, "src/tables.rs", "d")]),
            5_000,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "no file of src/realize/ (named by the spec: src/tables.rs) is at most 5000 bytes"
        );
    }

    #[test]
    fn the_prompt_fence_outlasts_the_files_own() {
        assert_eq!(fence_for("fn a() {}\n"), "```");
        assert_eq!(fence_for("//! ```\n"), "```");
        assert_eq!(fence_for("let s = \"\n```sh\n\";\n"), "````");
        assert_eq!(fence_for("````\n"), "`````");
    }
}

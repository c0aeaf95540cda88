//! The proxy's records directory (`--records DIR`), read back: the
//! manifest the proxy writes when it starts ([`MANIFEST_FILE`]) and one
//! JSON-lines file per conversation, each line a [`RecordedRequest`].
//! `ecdysis-host show` and `report` read it through [`read_dir`].

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use ecdysis_runner::agent::HookRecord;

use crate::conversation::Retry;
use crate::ledger::{LEDGER_FILE, read_ledger};

/// The file that marks a directory as a proxy's records and says how they
/// were made.
pub const MANIFEST_FILE: &str = "proxy.json";

/// The `format` field of [`MANIFEST_FILE`].
pub const FORMAT: &str = "ecdysis-proxy-records/1";

/// What [`MANIFEST_FILE`] holds: the settings the records were made under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// The harness's hash, when the proxy was told it.
    #[serde(default)]
    pub harness: Option<String>,
    /// The episodes' domain.
    pub domain: String,
    /// The upstream's base URL.
    pub upstream: String,
    /// Upstream tries after a blocked reply, per request.
    pub max_retries: u32,
    /// The spending limit (`--max-usd`) the proxy ran under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_usd: Option<f64>,
    /// The domain whose environment the env view read a mirror of
    /// (`--env-mirror`); `None`: no environment was attached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_mirror: Option<String>,
}

/// One answered request as a records file holds it (what
/// [`crate::RequestRecord`] wrote).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// The conversation's id.
    pub conversation: String,
    /// The request's number in the writing process's record of the
    /// conversation (a restarted proxy counts from 1 again).
    pub request: u64,
    /// Whether the episode was rebuilt by replay.
    pub replayed: bool,
    /// Replies refused and asked again about.
    pub retries: Vec<Retry>,
    /// Whether the retries ran out.
    pub exhausted: bool,
    /// Upstream completions asked for.
    pub upstream_requests: u64,
    /// Their prompt tokens.
    pub prompt_tokens: u64,
    /// Their completion tokens.
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, those served from the upstream's prefix cache.
    #[serde(default)]
    pub cached_prompt_tokens: u64,
    /// USD of the completions at their model's price; `None` when it had
    /// no price (or the records predate the ledger).
    #[serde(default)]
    pub usd: Option<f64>,
    /// Every hook call the request made, in order (see
    /// [`crate::RequestRecord::hooks`]).
    pub hooks: Vec<HookRecord>,
    /// How many of `hooks` (the first ones) rebuilt the episode by replay.
    #[serde(default)]
    pub replayed_hooks: usize,
    /// Why the environment mirror was detached, once it was.
    #[serde(default)]
    pub mirror_diverged: Option<String>,
}

/// One conversation's file, read.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationLog {
    /// The conversation's id (from its first line).
    pub id: String,
    /// The file it was read from.
    pub file: PathBuf,
    /// Its requests, in the order they were answered.
    pub requests: Vec<RecordedRequest>,
}

impl ConversationLog {
    /// Hook calls over every request.
    pub fn hooks(&self) -> impl Iterator<Item = &HookRecord> {
        self.requests.iter().flat_map(|r| &r.hooks)
    }

    /// Sum of `f` over the requests.
    pub fn total(&self, f: impl Fn(&RecordedRequest) -> u64) -> u64 {
        self.requests.iter().map(f).sum()
    }

    /// Its counts, as `show` and `report` print them.
    pub fn counts(&self) -> Counts {
        Counts {
            conversations: 1,
            requests: self.requests.len() as u64,
            replayed: self.total(|r| u64::from(r.replayed)),
            refused: self.total(|r| r.retries.len() as u64),
            exhausted: self.total(|r| u64::from(r.exhausted)),
            upstream: self.total(|r| r.upstream_requests),
            prompt_tokens: self.total(|r| r.prompt_tokens),
            completion_tokens: self.total(|r| r.completion_tokens),
            cached_prompt_tokens: self.total(|r| r.cached_prompt_tokens),
            usd: self.requests.iter().filter_map(|r| r.usd).sum(),
            unpriced: self.total(|r| u64::from(r.usd.is_none() && r.upstream_requests > 0)),
            hooks: self.hooks().count() as u64,
            interventions: self.hooks().filter(|h| h.intervened).count() as u64,
        }
    }
}

/// A conversation's counts, or the sum over a records directory (one
/// definition for `show` and `report`, so the two never disagree).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counts {
    /// Conversations counted.
    pub conversations: u64,
    /// Requests answered.
    pub requests: u64,
    /// Requests whose episode was rebuilt by replay.
    pub replayed: u64,
    /// Refused replies the upstream was asked again for.
    pub refused: u64,
    /// Requests that ran out of tries.
    pub exhausted: u64,
    /// Upstream completions.
    pub upstream: u64,
    /// Prompt tokens the upstream reported.
    pub prompt_tokens: u64,
    /// Completion tokens the upstream reported.
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, those served from the upstream's prefix cache.
    pub cached_prompt_tokens: u64,
    /// USD of the priced requests' completions.
    pub usd: f64,
    /// Requests whose completions had no price (not in `usd`).
    pub unpriced: u64,
    /// Hook calls, replays included.
    pub hooks: u64,
    /// Hook calls that intervened.
    pub interventions: u64,
}

impl std::ops::Add for Counts {
    type Output = Counts;
    fn add(self, o: Counts) -> Counts {
        Counts {
            conversations: self.conversations + o.conversations,
            requests: self.requests + o.requests,
            replayed: self.replayed + o.replayed,
            refused: self.refused + o.refused,
            exhausted: self.exhausted + o.exhausted,
            upstream: self.upstream + o.upstream,
            prompt_tokens: self.prompt_tokens + o.prompt_tokens,
            completion_tokens: self.completion_tokens + o.completion_tokens,
            cached_prompt_tokens: self.cached_prompt_tokens + o.cached_prompt_tokens,
            usd: self.usd + o.usd,
            unpriced: self.unpriced + o.unpriced,
            hooks: self.hooks + o.hooks,
            interventions: self.interventions + o.interventions,
        }
    }
}

impl Records {
    /// The sum of every conversation's counts.
    pub fn totals(&self) -> Counts {
        self.conversations
            .iter()
            .map(ConversationLog::counts)
            .fold(Counts::default(), |a, b| a + b)
    }
}

/// A records directory, read: its manifest and conversations (by file
/// name).
#[derive(Debug, Clone, PartialEq)]
pub struct Records {
    /// The directory.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
    /// Its conversations, ordered by file name.
    pub conversations: Vec<ConversationLog>,
    /// Every upstream call of the ledger's file ([`LEDGER_FILE`]), in
    /// order; empty for records that predate it.
    pub calls: Vec<ecdysis_model::CallRecord>,
}

impl Records {
    /// The ledger's totals: per model, failures, unpriced models.
    pub fn ledger(&self) -> ecdysis_model::LedgerSummary {
        let ledger = ecdysis_model::UsageLedger::default();
        ledger.import(self.calls.clone());
        ledger.summary()
    }
}

/// Why a records directory could not be read, naming the file (and line).
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    /// The directory has no [`MANIFEST_FILE`].
    #[error(
        "{0} is not a proxy's records directory (no {MANIFEST_FILE}; `ecdysis-host proxy --records DIR` writes one)"
    )]
    NotRecords(PathBuf),
    /// The manifest does not parse, or names another format.
    #[error("{path} is not a proxy records manifest: {reason}")]
    BadManifest {
        /// The manifest.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A line of a conversation's file is not a recorded request.
    #[error("{path}, line {line}: {reason}")]
    Corrupt {
        /// The conversation's file.
        path: PathBuf,
        /// The line (1-based).
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Whether `dir` is a proxy's records directory (holds a manifest).
pub fn is_records_dir(dir: &Path) -> bool {
    dir.join(MANIFEST_FILE).is_file()
}

/// Write `manifest` into `dir` (created if needed), atomically.
pub fn write_manifest(dir: &Path, manifest: &Manifest) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let bytes = serde_json::to_vec_pretty(manifest).map_err(std::io::Error::other)?;
    ecdysis_sys::fsutil::atomic_write(&dir.join(MANIFEST_FILE), &bytes)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RecordsError + '_ {
    move |source| RecordsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Read the records directory `dir`: every `*.jsonl` file is one
/// conversation. Any line that is not a whole recorded request is an error
/// naming its file and line, a last line cut short included (the proxy
/// writes each line whole, so a cut line means a crash mid-write or a
/// damaged file, not a write in progress worth skipping quietly).
pub fn read_dir(dir: &Path) -> Result<Records, RecordsError> {
    let manifest_path = dir.join(MANIFEST_FILE);
    let bytes = match std::fs::read(&manifest_path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(RecordsError::NotRecords(dir.to_path_buf()));
        }
        Err(e) => return Err(io(&manifest_path)(e)),
    };
    let manifest: Manifest =
        serde_json::from_slice(&bytes).map_err(|e| RecordsError::BadManifest {
            path: manifest_path.clone(),
            reason: e.to_string(),
        })?;
    if manifest.format != FORMAT {
        return Err(RecordsError::BadManifest {
            path: manifest_path,
            reason: format!("format `{}`, this build reads `{FORMAT}`", manifest.format),
        });
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .map(|e| e.map(|e| e.path()).map_err(io(dir)))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl") && p.is_file())
        .filter(|p| p.file_name().is_none_or(|n| n != LEDGER_FILE))
        .collect();
    files.sort();
    let conversations = files
        .into_iter()
        .map(|f| read_conversation(&f))
        .collect::<Result<_, _>>()?;
    Ok(Records {
        dir: dir.to_path_buf(),
        manifest,
        conversations,
        calls: read_ledger(&dir.join(LEDGER_FILE))?,
    })
}

/// The JSON lines of the file at `path` (its bytes `bytes`), each with its
/// 1-based line number; blank lines are skipped, and a line that is not a
/// `what` is an error naming the file and line (a last line without its
/// newline is said to be cut short).
pub(crate) fn json_lines<T: serde::de::DeserializeOwned>(
    path: &Path,
    bytes: &[u8],
    what: &str,
) -> Result<Vec<(usize, T)>, RecordsError> {
    let corrupt = |line: usize, reason: String| RecordsError::Corrupt {
        path: path.to_path_buf(),
        line,
        reason,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = bytes[..e.valid_up_to()]
            .iter()
            .filter(|b| **b == b'\n')
            .count();
        corrupt(line + 1, "not UTF-8".into())
    })?;
    let mut out = Vec::new();
    for (i, line) in text.split_inclusive('\n').enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value = serde_json::from_str(line).map_err(|e| {
            let cut = if line.ends_with('\n') {
                ""
            } else {
                " (the last line is cut short: no newline)"
            };
            corrupt(i + 1, format!("not {what}: {e}{cut}"))
        })?;
        out.push((i + 1, value));
    }
    Ok(out)
}

/// One conversation's file.
pub fn read_conversation(path: &Path) -> Result<ConversationLog, RecordsError> {
    let bytes = std::fs::read(path).map_err(io(path))?;
    let mut requests: Vec<RecordedRequest> = Vec::new();
    for (line, request) in json_lines::<RecordedRequest>(path, &bytes, "a recorded request")? {
        if let Some(first) = requests.first()
            && first.conversation != request.conversation
        {
            return Err(RecordsError::Corrupt {
                path: path.to_path_buf(),
                line,
                reason: format!(
                    "conversation `{}`, but the file's first line is `{}`",
                    request.conversation, first.conversation
                ),
            });
        }
        requests.push(request);
    }
    let id = requests.first().map_or_else(
        || {
            path.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        },
        |r| r.conversation.clone(),
    );
    Ok(ConversationLog {
        id,
        file: path.to_path_buf(),
        requests,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RequestRecord;

    fn hook(name: &str, intervened: bool) -> HookRecord {
        HookRecord {
            step: 1,
            hook: name.into(),
            decision: serde_json::json!({"kind": "proceed"}),
            intervened,
            fuel: 10,
            micros: 5,
            added_bytes: 0,
            error: None,
            logs: vec![],
        }
    }

    /// A records directory with one conversation of `lines` (raw).
    fn dir_with(lines: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        write_manifest(
            dir.path(),
            &Manifest {
                format: FORMAT.into(),
                harness: Some("abc".into()),
                domain: "proxy/generic".into(),
                upstream: "http://127.0.0.1:1/v1".into(),
                max_retries: 3,
                max_usd: None,
                env_mirror: None,
            },
        )
        .unwrap();
        std::fs::write(dir.path().join("c1.jsonl"), lines).unwrap();
        dir
    }

    fn written(conversation: &str, retries: &[Retry], hooks: &[HookRecord]) -> String {
        serde_json::to_string(&RequestRecord {
            conversation,
            request: 1,
            replayed: true,
            retries,
            exhausted: false,
            upstream_requests: 2,
            prompt_tokens: 20,
            completion_tokens: 7,
            cached_prompt_tokens: 4,
            usd: Some(0.5),
            mirror_diverged: None,
            hooks,
            replayed_hooks: 1,
        })
        .unwrap()
    }

    #[test]
    fn what_the_proxy_writes_reads_back() {
        let retry = Retry {
            messages: vec![serde_json::json!({"role": "assistant", "content": "x"})],
            feedback: vec!["unknown tool".into()],
        };
        let hooks = [hook("realize", true), hook("regulate", false)];
        let line = written("c1", std::slice::from_ref(&retry), &hooks);
        let dir = dir_with(&format!("{line}\n{line}\n"));
        let records = read_dir(dir.path()).unwrap();
        assert_eq!(records.manifest.harness.as_deref(), Some("abc"));
        let [c] = records.conversations.as_slice() else {
            panic!("one conversation: {:?}", records.conversations)
        };
        assert_eq!(c.id, "c1");
        assert_eq!(c.requests.len(), 2);
        assert_eq!(c.requests[0].retries, vec![retry]);
        assert_eq!(c.requests[0].hooks, hooks);
        assert_eq!(c.requests[0].replayed_hooks, 1);
        assert_eq!(c.total(|r| r.prompt_tokens), 40);
        assert_eq!(c.hooks().filter(|h| h.intervened).count(), 2);
    }

    #[test]
    fn a_damaged_line_is_named_by_file_and_line() {
        let line = written("c1", &[], &[hook("realize", false)]);
        let dir = dir_with(&format!("{line}\n{{\"conversation\": 3}}\n{line}\n"));
        let e = read_dir(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("c1.jsonl, line 2: not a recorded request"),
            "{e}"
        );
    }

    #[test]
    fn a_cut_last_line_is_an_error_naming_it() {
        let line = written("c1", &[], &[hook("realize", false)]);
        let dir = dir_with(&format!("{line}\n{}", &line[..line.len() / 2]));
        let e = read_dir(dir.path()).unwrap_err().to_string();
        assert!(e.contains("c1.jsonl, line 2:"), "{e}");
        assert!(e.contains("cut short"), "{e}");
    }

    #[test]
    fn a_line_of_another_conversation_is_an_error() {
        let dir = dir_with(&format!(
            "{}\n{}\n",
            written("c1", &[], &[]),
            written("c2", &[], &[])
        ));
        let e = read_dir(dir.path()).unwrap_err().to_string();
        assert!(e.contains("line 2: conversation `c2`"), "{e}");
    }

    #[test]
    fn a_directory_without_a_manifest_is_not_records() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_dir(dir.path()).unwrap_err();
        assert!(matches!(e, RecordsError::NotRecords(_)), "{e}");
        assert!(!is_records_dir(dir.path()));
        std::fs::write(dir.path().join(MANIFEST_FILE), "{\"format\": \"other/9\"}").unwrap();
        let e = read_dir(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("proxy.json is not a proxy records manifest"),
            "{e}"
        );
    }
}

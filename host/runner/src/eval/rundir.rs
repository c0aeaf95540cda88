//! The result directory of a run: `config.json`, `trajectories.jsonl`
//! (append-only, one finished episode per line) and `summary.json`.
//!
//! Re-running the same command on an existing directory resumes it: the
//! finished (task, trial) pairs are read back and not re-run. A changed
//! configuration is refused with a diff. A line torn by a kill at the end of
//! the file is cut off (that episode simply runs again); damage anywhere
//! else is reported, never silently dropped.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::agent::EpisodeRecord;
use ecdysis_sys::fsutil::{PathError, atomic_write};
pub use ecdysis_sys::layout::{CandidateLayout, RunLayout, TrainLayout};

/// The run's configuration (see [`RunLayout`]).
pub const CONFIG_FILE: &str = RunLayout::CONFIG;
/// One finished, scored episode per line (see [`RunLayout`]).
pub const TRAJECTORIES_FILE: &str = RunLayout::TRAJECTORIES;
/// The run's metrics (see [`RunLayout`]).
pub const SUMMARY_FILE: &str = RunLayout::SUMMARY;

/// What can go wrong with a result directory.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    /// A file could not be read, written or moved.
    #[error(transparent)]
    Io(#[from] PathError),
    /// The directory holds a run of another configuration (and the caller
    /// did not ask for `force_new`).
    #[error(
        "{dir} holds a run with a different configuration; re-run with --force-new to start over (the old run is kept beside it), or use another --out.\nchanged:\n{diff}"
    )]
    ConfigChanged {
        /// The result directory.
        dir: PathBuf,
        /// One `path: old -> new` line per changed setting.
        diff: String,
    },
    /// A file of the directory does not parse (a damaged line anywhere but
    /// at the end of a JSON-lines file, a damaged `config.json`).
    #[error("{path} is not valid: {reason}")]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// What is wrong (with the line number, for a JSON-lines file).
        reason: String,
    },
}

/// Lines "path: old -> new" for every leaf that differs between two JSON
/// values.
pub fn json_diff(old: &serde_json::Value, new: &serde_json::Value) -> Vec<String> {
    fn walk(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
        use serde_json::Value::Object;
        match (a, b) {
            (Object(x), Object(y)) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    let null = serde_json::Value::Null;
                    walk(
                        &p,
                        x.get(k).unwrap_or(&null),
                        y.get(k).unwrap_or(&null),
                        out,
                    );
                }
            }
            _ if a != b => out.push(format!("  {path}: {a} -> {b}")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", old, new, &mut out);
    out
}

fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, RunDirError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| RunDirError::Corrupt {
                path: path.to_path_buf(),
                reason: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(PathError::new("read", path, e).into()),
    }
}

/// Write `config` as `config.json` in `dir`, refusing (with a diff) a
/// directory that holds another configuration, unless `force_new`, which
/// moves the old directory aside (results are never deleted). The one
/// config check of the runner and the trainer.
pub fn claim_dir<C: Serialize + serde::de::DeserializeOwned>(
    dir: &Path,
    config: &C,
    force_new: bool,
) -> Result<(), RunDirError> {
    let config = serde_json::to_value(config).expect("config serializes");
    let config_path = dir.join(CONFIG_FILE);
    if let Some(old) = read_json::<serde_json::Value>(&config_path)?
        && old != config
        && !same_config::<C>(&old, &config)
    {
        if !force_new {
            return Err(RunDirError::ConfigChanged {
                dir: dir.to_path_buf(),
                diff: json_diff(&old, &config).join("\n"),
            });
        }
        // Keep the old run: move it aside rather than delete results.
        let aside = dir.with_file_name(format!(
            "{}.old-{}",
            dir.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default(),
            ecdysis_sys::fsutil::now_rfc3339().replace(':', "")
        ));
        std::fs::rename(dir, &aside).map_err(|e| PathError::new("move aside", dir, e))?;
        tracing::warn!(old = %aside.display(), "configuration changed: previous run moved aside");
    }
    std::fs::create_dir_all(dir).map_err(|e| PathError::new("create", dir, e))?;
    let pretty = serde_json::to_vec_pretty(&config).expect("config serializes");
    atomic_write(&config_path, &pretty).map_err(|e| PathError::new("write", &config_path, e))?;
    Ok(())
}

/// Whether a `config.json` written by an earlier version says the same as
/// `config`: read as today's type (settings added since take their
/// defaults) and written again. A run started before an upgrade that only
/// added defaulted settings resumes.
fn same_config<C: Serialize + serde::de::DeserializeOwned>(
    old: &serde_json::Value,
    config: &serde_json::Value,
) -> bool {
    serde_json::from_value::<C>(old.clone())
        .ok()
        .and_then(|c| serde_json::to_value(c).ok())
        .is_some_and(|v| &v == config)
}

/// How long an appended record may wait for its `fsync`: appends that
/// come closer together than this share one (group commit, as databases
/// do). A record is written to the file before `append` returns, so a
/// killed process loses nothing it appended; only an operating-system
/// crash can lose the last `SYNC_EVERY` of records, and a resume runs those
/// episodes again. Why group them: one sync costs about as much CPU as an
/// episode's whole bookkeeping (the journal, the block layer, a virtual
/// disk's doorbell).
pub const SYNC_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// An append-only JSON-lines file: one record per line, written before
/// `append` returns and synced to disk within [`SYNC_EVERY`] (at once when
/// the previous sync is older). Reading it back cuts a torn last line (a
/// kill mid-write) and reports damage anywhere else with the line number.
pub struct JsonlLog<T> {
    path: PathBuf,
    shared: Arc<LogShared>,
    /// Syncs what the appends left unsynced (see [`SYNC_EVERY`]).
    syncer: Option<std::thread::JoinHandle<()>>,
    _records: std::marker::PhantomData<fn(&T)>,
}

struct LogShared {
    state: Mutex<LogState>,
    /// Signalled when a record is left unsynced or the log closes.
    wake: Condvar,
}

struct LogState {
    file: File,
    /// A line buffer kept between appends: an episode's record is large,
    /// and a fresh buffer per append page-faults on every page of it.
    line: Vec<u8>,
    last_sync: Instant,
    /// Records written since the last sync began.
    dirty: bool,
    /// Syncs the syncer has made (tests read it).
    syncs: u64,
    closed: bool,
    /// The deferred sync's failure, reported by the next append.
    sync_error: Option<std::io::Error>,
}

impl<T: Serialize + DeserializeOwned> JsonlLog<T> {
    /// Open (creating) the log at `path` and read back its records.
    pub fn open(path: &Path) -> Result<(JsonlLog<T>, Vec<T>), RunDirError> {
        let records = read_jsonl(path, true)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| PathError::new("create", dir, e))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| PathError::new("open", path, e))?;
        let sync_handle = file
            .try_clone()
            .map_err(|e| PathError::new("open", path, e))?;
        let shared = Arc::new(LogShared {
            state: Mutex::new(LogState {
                file,
                line: Vec::new(),
                // The first append syncs at once.
                last_sync: Instant::now()
                    .checked_sub(SYNC_EVERY)
                    .unwrap_or_else(Instant::now),
                dirty: false,
                syncs: 0,
                closed: false,
                sync_error: None,
            }),
            wake: Condvar::new(),
        });
        let for_syncer = shared.clone();
        let syncer = std::thread::Builder::new()
            .name("ecdysis-log-sync".into())
            .spawn(move || deferred_syncs(&for_syncer, &sync_handle))
            .map_err(|e| PathError::new("start the syncer of", path, e))?;
        Ok((
            JsonlLog {
                path: path.to_path_buf(),
                shared,
                syncer: Some(syncer),
                _records: std::marker::PhantomData,
            },
            records,
        ))
    }

    /// Append one record as a single line: written before returning, and
    /// synced by the syncer thread at once if the last sync is older than
    /// [`SYNC_EVERY`], else within it.
    pub fn append(&self, record: &T) -> Result<(), RunDirError> {
        let mut guard = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        let st = &mut *guard;
        if let Some(e) = st.sync_error.take() {
            return Err(PathError::new("sync", &self.path, e).into());
        }
        st.line.clear();
        serde_json::to_writer(&mut st.line, record).expect("record serializes");
        st.line.push(b'\n');
        let written = st.file.write_all(&st.line);
        // The sync is always the syncer's, even for the first record after a
        // quiet spell (it syncs that one at once): an append then never
        // blocks on the disk, so the runner calls it on its own threads
        // instead of handing it to the blocking pool (two thread switches
        // per episode).
        if written.is_ok() && !st.dirty {
            st.dirty = true;
            self.shared.wake.notify_one();
        }
        // A run's largest record sets the buffer's size; a rare giant one
        // is not kept for the rest of the run.
        if st.line.capacity() > 4 << 20 {
            st.line = Vec::new();
        }
        written.map_err(|e| PathError::new("append to", &self.path, e))?;
        Ok(())
    }
}

/// The syncer thread: waits for an unsynced record, lets [`SYNC_EVERY`]
/// pass since the last sync (more records join it), syncs; on close, syncs
/// what is left and ends.
fn deferred_syncs(shared: &LogShared, file: &File) {
    let mut st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        while !st.dirty && !st.closed {
            st = shared.wake.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if !st.closed {
            let due = st.last_sync + SYNC_EVERY;
            let now = Instant::now();
            if due > now {
                st = shared
                    .wake
                    .wait_timeout(st, due - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
                continue;
            }
        }
        let closing = st.closed;
        if st.dirty {
            // Appends go on while this one syncs: they mark the log dirty
            // again and wait for the next round.
            st.dirty = false;
            st.last_sync = Instant::now();
            drop(st);
            let synced = file.sync_data();
            st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            st.syncs += 1;
            if let Err(e) = synced {
                tracing::error!(error = %e, "syncing a JSON-lines log failed");
                st.sync_error = Some(e);
            }
        }
        if closing && !st.dirty {
            return;
        }
    }
}

impl<T> Drop for JsonlLog<T> {
    fn drop(&mut self) {
        {
            let mut st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            st.closed = true;
        }
        self.shared.wake.notify_one();
        if let Some(t) = self.syncer.take() {
            let _ = t.join();
        }
    }
}

/// An open result directory.
pub struct RunDir {
    dir: PathBuf,
    log: JsonlLog<EpisodeRecord>,
}

impl RunDir {
    /// Open `dir` for a run with `config`, creating it or resuming it.
    /// Returns the episodes already finished.
    pub fn open<C: Serialize + serde::de::DeserializeOwned>(
        dir: &Path,
        config: &C,
        force_new: bool,
    ) -> Result<(RunDir, Vec<EpisodeRecord>), RunDirError> {
        claim_dir(dir, config, force_new)?;
        let (log, done) = JsonlLog::open(&dir.join(TRAJECTORIES_FILE))?;
        Ok((
            RunDir {
                dir: dir.to_path_buf(),
                log,
            },
            done,
        ))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Append one finished episode (written before returning, synced
    /// within [`SYNC_EVERY`]).
    pub fn append(&self, record: &EpisodeRecord) -> Result<(), RunDirError> {
        self.log.append(record)
    }

    /// Write `summary.json` atomically.
    pub fn write_summary<S: Serialize>(&self, summary: &S) -> Result<(), RunDirError> {
        write_json(&self.dir.join(SUMMARY_FILE), summary)
    }
}

/// Write `value` as pretty JSON to `path`, atomically (fsynced, renamed).
pub fn write_json<S: Serialize>(path: &Path, value: &S) -> Result<(), RunDirError> {
    let bytes = serde_json::to_vec_pretty(value).expect("value serializes");
    atomic_write(path, &bytes).map_err(|e| PathError::new("write", path, e))?;
    Ok(())
}

/// Read `trajectories.jsonl`: see [`read_jsonl`].
pub fn read_trajectories(path: &Path, repair: bool) -> Result<Vec<EpisodeRecord>, RunDirError> {
    read_jsonl(path, repair)
}

/// Read a JSON-lines file (missing: empty). With `repair`, a torn last line
/// (no trailing newline, or does not parse) is cut off the file; a bad line
/// elsewhere is an error naming the file and the line.
pub fn read_jsonl<T: DeserializeOwned>(path: &Path, repair: bool) -> Result<Vec<T>, RunDirError> {
    let file = match ecdysis_sys::fsutil::open_regular(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(PathError::new("open", path, e).into()),
    };
    let mut reader = BufReader::new(file);
    let mut out = Vec::new();
    let mut offset: u64 = 0;
    let mut line_no = 0;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| PathError::new("read", path, e))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let complete = buf.ends_with(b"\n");
        match serde_json::from_slice::<T>(&buf) {
            Ok(r) if complete => out.push(r),
            parsed => {
                let at_end = reader
                    .fill_buf()
                    .map(|rest| rest.is_empty())
                    .unwrap_or(false);
                if at_end && (!complete || parsed.is_err()) && repair {
                    tracing::warn!(path = %path.display(), line = line_no, "cutting a torn last line (its record will be redone)");
                    let f = OpenOptions::new()
                        .write(true)
                        .open(path)
                        .map_err(|e| PathError::new("open", path, e))?;
                    f.set_len(offset)
                        .map_err(|e| PathError::new("truncate", path, e))?;
                    break;
                }
                let reason = match parsed {
                    Err(e) => e.to_string(),
                    Ok(_) => "line is not terminated".into(),
                };
                return Err(RunDirError::Corrupt {
                    path: path.to_path_buf(),
                    reason: format!("line {line_no}: {reason}"),
                });
            }
        }
        offset += n as u64;
    }
    Ok(out)
}

/// Finished episodes keyed by (task, trial); a duplicate keeps the first.
pub fn by_pair(records: Vec<EpisodeRecord>) -> BTreeMap<(String, u32), EpisodeRecord> {
    let mut map = BTreeMap::new();
    for r in records {
        map.entry((r.task_id.clone(), r.trial)).or_insert(r);
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diffs_name_changed_leaves() {
        let a = serde_json::json!({"seed": 1, "agent": {"model": "x"}, "k": [1]});
        let b = serde_json::json!({"seed": 2, "agent": {"model": "x"}, "k": [1], "new": true});
        let d = json_diff(&a, &b);
        assert_eq!(d, vec!["  new: null -> true", "  seed: 1 -> 2"]);
    }

    #[test]
    fn a_run_resumes_after_an_upgrade_that_only_added_defaulted_settings() {
        #[derive(Serialize, serde::Deserialize)]
        struct Before {
            seed: u64,
        }
        #[derive(Serialize, serde::Deserialize)]
        struct After {
            seed: u64,
            #[serde(default = "seven")]
            added: u64,
        }
        fn seven() -> u64 {
            7
        }
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        claim_dir(&run, &Before { seed: 1 }, false).unwrap();
        // The same run with the new setting at its default: resumes.
        claim_dir(&run, &After { seed: 1, added: 7 }, false).unwrap();
        // The new setting at another value is another configuration.
        let err = claim_dir(&run, &After { seed: 1, added: 8 }, false).unwrap_err();
        assert!(matches!(err, RunDirError::ConfigChanged { .. }), "{err}");
        let err = claim_dir(&run, &After { seed: 2, added: 7 }, false).unwrap_err();
        assert!(err.to_string().contains("seed"), "{err}");
    }

    fn dirty(log: &JsonlLog<serde_json::Value>) -> bool {
        log.shared.state.lock().unwrap().dirty
    }

    fn syncs(log: &JsonlLog<serde_json::Value>) -> u64 {
        log.shared.state.lock().unwrap().syncs
    }

    /// Waits until the log is clean and at least `want` syncs have ended
    /// (the syncer clears `dirty` before its sync and counts it after, so
    /// a clean log alone can be mid-sync).
    fn wait_until_synced(log: &JsonlLog<serde_json::Value>, want: u64) {
        let deadline = Instant::now() + SYNC_EVERY * 20;
        while (dirty(log) || syncs(log) < want) && Instant::now() < deadline {
            std::thread::sleep(SYNC_EVERY / 20);
        }
        assert!(!dirty(log), "the syncer syncs within the interval");
    }

    #[test]
    fn appends_are_readable_at_once_and_synced_in_groups_within_the_interval() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let (log, old) = JsonlLog::<serde_json::Value>::open(&path).unwrap();
        assert!(old.is_empty());
        log.append(&serde_json::json!({"n": 1})).unwrap();
        // The first record after a quiet spell is synced at once, by the
        // syncer: the append itself never waits for the disk.
        wait_until_synced(&log, 1);
        assert_eq!(syncs(&log), 1);
        log.append(&serde_json::json!({"n": 2})).unwrap();
        log.append(&serde_json::json!({"n": 3})).unwrap();
        assert!(
            dirty(&log),
            "records close behind it wait for the group's sync"
        );
        // Written before `append` returned: a killed process loses none.
        let read: Vec<serde_json::Value> = read_jsonl(&path, false).unwrap();
        assert_eq!(read.len(), 3);
        wait_until_synced(&log, 2);
        assert_eq!(syncs(&log), 2, "the two close records share one sync");
        log.append(&serde_json::json!({"n": 4})).unwrap();
        drop(log);
        let (reopened, read) = JsonlLog::<serde_json::Value>::open(&path).unwrap();
        assert_eq!(read.len(), 4);
        assert!(reopened.syncer.is_some());
    }
}

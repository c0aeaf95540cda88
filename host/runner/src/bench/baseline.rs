//! The runner bench's regression check: the host's own work outside the
//! hooks, as a multiple of the waiting floor measured beside it, compared
//! with a recorded multiple.
//!
//! Why this ratio: both sides are process CPU measured in one run on one
//! machine, so the machine's speed cancels out, and the hooks (the
//! harness's own cost, which evolution edits) are left out, so only the
//! host's work moves it. A regression in the host's own work per episode
//! (such as a token estimate of the whole conversation before every model
//! call) moves it by that work's factor, and the median of a few
//! repetitions keeps noise from doing the same (the performance page has
//! the measurements). The recorded value belongs to a
//! build profile and to the bench's options, since a debug build's host
//! work is a different multiple of the same floor.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use ecdysis_sys::fsutil::atomic_write;

use super::runner::{RunnerBenchOptions, RunnerBenchReport};

/// The baseline file: one entry per harness, build profile and options.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunnerBaseline {
    /// The recorded entries.
    pub entries: Vec<BaselineEntry>,
}

/// One recorded measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineEntry {
    /// The harness as `bench --harness` names it (`none` for Direct).
    pub harness: String,
    /// `release` or `debug` (the build that measured it).
    pub profile: String,
    /// The bench's options the ratio holds for.
    pub options: BaselineOptions,
    /// Host CPU outside hooks per episode over the waiting floor per
    /// episode: the median over the repetitions.
    pub outside_hooks_over_floor: f64,
    /// A measurement fails the check above `outside_hooks_over_floor *
    /// tolerance`.
    pub tolerance: f64,
    /// The commit the measuring binary was built from, as given to
    /// `--record` (free text: the file is read by people too).
    pub commit: String,
    /// When it was recorded (UTC, RFC 3339).
    pub recorded: String,
}

/// The options a ratio depends on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineOptions {
    /// Domain and split.
    pub domain: String,
    /// The split.
    pub split: String,
    /// Simulated latency per call, in milliseconds.
    pub latency_ms: u64,
    /// Episodes at once.
    pub concurrency: usize,
    /// Trials per task.
    pub trials: u32,
}

impl BaselineOptions {
    /// The options of a bench run.
    pub fn of(opts: &RunnerBenchOptions) -> Self {
        BaselineOptions {
            domain: opts.domain.clone(),
            split: opts.split.clone(),
            latency_ms: u64::try_from(opts.latency.as_millis()).unwrap_or(u64::MAX),
            concurrency: opts.concurrency,
            trials: opts.trials,
        }
    }
}

/// Why a baseline could not be read, written or applied.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    /// The file could not be read or written.
    #[error("{action} runner baseline {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a baseline.
    #[error("runner baseline {path} is not valid: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: serde_json::Error,
    },
    /// The file has no entry for this harness, profile and options.
    #[error(
        "runner baseline {path} has no entry for harness {harness} in a {profile} build with {options}; record one with --record (entries: {known})"
    )]
    NoEntry {
        /// The file.
        path: PathBuf,
        /// The harness measured.
        harness: String,
        /// The build profile.
        profile: String,
        /// The options, as flags.
        options: String,
        /// The entries the file has, for the message.
        known: String,
    },
    /// The measurement has no ratio (no process CPU clock, or a zero floor).
    #[error(
        "the runner bench measured no waiting floor on this platform, so there is nothing to compare with {path}"
    )]
    NoRatio {
        /// The file.
        path: PathBuf,
    },
    /// A tolerance that cannot be a bound.
    #[error("tolerance {0} must be a finite number of at least 1")]
    Tolerance(f64),
}

/// The outcome of a check.
#[derive(Debug, Clone, Serialize)]
pub struct CheckOutcome {
    /// The measured ratio (median of the repetitions).
    pub measured: f64,
    /// The recorded ratio.
    pub recorded: f64,
    /// The bound the measurement had to stay under.
    pub limit: f64,
    /// The recorded entry's commit.
    pub recorded_commit: String,
}

impl CheckOutcome {
    /// Whether the measurement stayed within the bound.
    pub fn passed(&self) -> bool {
        self.measured <= self.limit
    }

    /// One line for the terminal.
    pub fn render(&self) -> String {
        format!(
            "regression check: host work outside hooks = {:.2}x the waiting floor (recorded {:.2}x at {}; limit {:.2}x): {}",
            self.measured,
            self.recorded,
            self.recorded_commit,
            self.limit,
            if self.passed() {
                "ok"
            } else {
                "REGRESSION: the host's own work per episode grew past the recorded bound"
            }
        )
    }
}

/// The build profile of this binary, as entries name it.
pub fn this_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// The median of the repetitions' ratios (`None` if any has none).
pub fn median_ratio(reports: &[RunnerBenchReport]) -> Option<f64> {
    let mut ratios: Vec<f64> = reports
        .iter()
        .map(RunnerBenchReport::outside_hooks_over_floor)
        .collect::<Option<_>>()?;
    if ratios.is_empty() {
        return None;
    }
    ratios.sort_by(f64::total_cmp);
    let mid = ratios.len() / 2;
    Some(if ratios.len() % 2 == 1 {
        ratios[mid]
    } else {
        (ratios[mid - 1] + ratios[mid]) / 2.0
    })
}

impl RunnerBaseline {
    /// Reads a baseline file.
    pub fn read(path: &Path) -> Result<Self, BaselineError> {
        let text = std::fs::read_to_string(path).map_err(|source| BaselineError::Io {
            action: "read",
            path: path.into(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| BaselineError::Parse {
            path: path.into(),
            source,
        })
    }

    /// Reads a baseline file, or an empty baseline if there is none yet.
    pub fn read_or_empty(path: &Path) -> Result<Self, BaselineError> {
        match std::fs::metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            _ => Self::read(path),
        }
    }

    /// Compares a measured ratio with this file's entry for the harness,
    /// this build's profile and the options.
    pub fn check(
        &self,
        path: &Path,
        harness: &str,
        options: &BaselineOptions,
        measured: Option<f64>,
    ) -> Result<CheckOutcome, BaselineError> {
        let profile = this_profile();
        let entry = self
            .entries
            .iter()
            .find(|e| e.harness == harness && e.profile == profile && &e.options == options)
            .ok_or_else(|| BaselineError::NoEntry {
                path: path.into(),
                harness: harness.into(),
                profile: profile.into(),
                options: options_as_flags(options),
                known: if self.entries.is_empty() {
                    "none".into()
                } else {
                    self.entries
                        .iter()
                        .map(|e| {
                            format!(
                                "{} ({}, {})",
                                e.harness,
                                e.profile,
                                options_as_flags(&e.options)
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("; ")
                },
            })?;
        let measured = measured.ok_or_else(|| BaselineError::NoRatio { path: path.into() })?;
        Ok(CheckOutcome {
            measured,
            recorded: entry.outside_hooks_over_floor,
            limit: entry.outside_hooks_over_floor * entry.tolerance,
            recorded_commit: entry.commit.clone(),
        })
    }

    /// Puts `entry` in place of the one for the same harness, profile and
    /// options (or adds it), and writes the file atomically.
    pub fn record(mut self, path: &Path, entry: BaselineEntry) -> Result<(), BaselineError> {
        if !(entry.tolerance.is_finite() && entry.tolerance >= 1.0) {
            return Err(BaselineError::Tolerance(entry.tolerance));
        }
        self.entries.retain(|e| {
            !(e.harness == entry.harness
                && e.profile == entry.profile
                && e.options == entry.options)
        });
        self.entries.push(entry);
        let mut text = serde_json::to_string_pretty(&self).expect("a baseline serialises");
        text.push('\n');
        atomic_write(path, text.as_bytes()).map_err(|source| BaselineError::Io {
            action: "write",
            path: path.into(),
            source,
        })
    }
}

/// The options as the flags that reproduce them.
fn options_as_flags(o: &BaselineOptions) -> String {
    format!(
        "--latency-ms {} --concurrency {} --trials {} ({} {})",
        o.latency_ms, o.concurrency, o.trials, o.domain, o.split
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(cpu: f64, hooks: f64, floor: f64) -> RunnerBenchReport {
        RunnerBenchReport {
            episodes: 10,
            wall_seconds: 1.0,
            lower_bound_seconds: 1.0,
            dispatch_bound_seconds: 1.0,
            episode_host_percent: 0.0,
            cpu_seconds: Some(cpu),
            simulated_seconds: 0.0,
            gold_cpu_seconds: None,
            gold_wall_seconds: 0.0,
            hook_seconds: hooks,
            waiting_floor_seconds: Some(floor),
        }
    }

    fn options() -> BaselineOptions {
        BaselineOptions::of(&RunnerBenchOptions::default())
    }

    fn entry(ratio: f64) -> BaselineEntry {
        BaselineEntry {
            harness: "none".into(),
            profile: this_profile().into(),
            options: options(),
            outside_hooks_over_floor: ratio,
            tolerance: 2.0,
            commit: "abc".into(),
            recorded: "2026-12-06T00:00:00Z".into(),
        }
    }

    #[test]
    fn the_median_ratio_leaves_out_hooks_and_ignores_one_outlier() {
        // (cpu - hooks) / floor: 3x, 4x, and one 40x run under load.
        let reports = [
            report(0.004, 0.001, 0.001),
            report(0.005, 0.001, 0.001),
            report(0.041, 0.001, 0.001),
        ];
        let median = median_ratio(&reports).unwrap();
        assert!((median - 4.0).abs() < 1e-9, "{median}");
        let even = median_ratio(&reports[..2]).unwrap();
        assert!((even - 3.5).abs() < 1e-9, "{even}");
        assert_eq!(median_ratio(&[]), None);
    }

    #[test]
    fn a_check_fails_above_the_recorded_ratio_times_the_tolerance() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("baseline.json");
        RunnerBaseline::default().record(&path, entry(5.0)).unwrap();
        let baseline = RunnerBaseline::read(&path).unwrap();
        let within = baseline
            .check(&path, "none", &options(), Some(9.9))
            .unwrap();
        assert!(within.passed(), "{}", within.render());
        assert!(within.render().ends_with("ok"), "{}", within.render());
        let over = baseline
            .check(&path, "none", &options(), Some(10.1))
            .unwrap();
        assert!(!over.passed());
        assert!(over.render().contains("REGRESSION"), "{}", over.render());
    }

    #[test]
    fn an_entry_is_only_found_for_its_harness_profile_and_options() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("baseline.json");
        RunnerBaseline::default().record(&path, entry(5.0)).unwrap();
        let baseline = RunnerBaseline::read(&path).unwrap();
        let err = baseline
            .check(&path, "guests/direct", &options(), Some(1.0))
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("guests/direct") && text.contains("none ("),
            "{text}"
        );
        let mut other = options();
        other.latency_ms = 20;
        let err = baseline
            .check(&path, "none", &other, Some(1.0))
            .unwrap_err();
        assert!(err.to_string().contains("--latency-ms 20"), "{err}");
        let err = baseline.check(&path, "none", &options(), None).unwrap_err();
        assert!(matches!(err, BaselineError::NoRatio { .. }), "{err}");
    }

    #[test]
    fn recording_replaces_the_same_entry_and_keeps_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("baseline.json");
        let mut direct = entry(3.0);
        direct.harness = "guests/direct".into();
        RunnerBaseline::read_or_empty(&path)
            .unwrap()
            .record(&path, entry(5.0))
            .unwrap();
        RunnerBaseline::read_or_empty(&path)
            .unwrap()
            .record(&path, direct.clone())
            .unwrap();
        RunnerBaseline::read_or_empty(&path)
            .unwrap()
            .record(&path, entry(6.0))
            .unwrap();
        let baseline = RunnerBaseline::read(&path).unwrap();
        assert_eq!(baseline.entries.len(), 2);
        assert!(baseline.entries.contains(&direct));
        assert!(baseline.entries.contains(&entry(6.0)));
        let err = RunnerBaseline::default()
            .record(
                &path,
                BaselineEntry {
                    tolerance: 0.5,
                    ..entry(1.0)
                },
            )
            .unwrap_err();
        assert!(matches!(err, BaselineError::Tolerance(_)), "{err}");
    }

    #[test]
    fn a_damaged_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("baseline.json");
        std::fs::write(&path, "{ not json").unwrap();
        let err = RunnerBaseline::read(&path).unwrap_err();
        assert!(err.to_string().contains("baseline.json"), "{err}");
        let err = RunnerBaseline::read(&dir.path().join("missing.json")).unwrap_err();
        assert!(matches!(err, BaselineError::Io { .. }), "{err}");
    }
}

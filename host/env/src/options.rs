//! How a process opens domains by name: the options a domain may read
//! ([`DomainOptions`], sent as they are to an isolated worker process) and
//! the registry that reads them ([`DomainOpener`]), which the binary hands
//! down. The layers between (the runner's workers, the service) hold an
//! opener and never name a benchmark, so editing one rebuilds only the
//! registry and the binary.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{Domain, EnvError};

/// Everything opening a domain needs (the command line's `--data`,
/// `--mysql-url`, `--sql-mode`). A worker process gets the parent's, so it
/// opens the domain the parent opened; it inherits the parent's working
/// directory and environment, so `None` resolves the same way.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DomainOptions {
    /// The τ² data (wheel, folder holding it, or extracted folder); `None`:
    /// the τ² crate's default location. DBBench and OS interaction ship
    /// their data in this repository.
    pub data: Option<PathBuf>,
    /// agentbench/dbbench: an existing server; `None` starts a private one
    /// per process.
    pub mysql_url: Option<String>,
    /// agentbench/dbbench: the sessions' `sql_mode`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub sql_mode: SqlMode,
}

fn is_default(mode: &SqlMode) -> bool {
    *mode == SqlMode::default()
}

/// The `sql_mode` a SQL domain's episode sessions run with (the server
/// settings each names are the SQL domain's own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SqlMode {
    /// MySQL 8's default, as the original's `mysql:8` container runs: what
    /// an agent meets there.
    #[default]
    Mysql8,
    /// The same without strict mode: how every reproducible DBBench label
    /// was made (239 of 240 gold statements reproduce their hash, against
    /// 237 under `Mysql8`).
    Lenient,
}

/// A `sql_mode` name that is neither `mysql8` nor `lenient` (the name
/// given).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown sql mode `{0}` (expected mysql8 or lenient)")]
pub struct UnknownSqlMode(pub String);

impl std::str::FromStr for SqlMode {
    type Err = UnknownSqlMode;
    fn from_str(s: &str) -> Result<Self, UnknownSqlMode> {
        match s {
            "mysql8" => Ok(SqlMode::Mysql8),
            "lenient" => Ok(SqlMode::Lenient),
            other => Err(UnknownSqlMode(other.to_string())),
        }
    }
}

/// Opens domains by name: the registry of every benchmark
/// (`ecdysis-domains`), handed down by the binary. A trait object rather
/// than a dependency, the way wasmtime's `Linker` takes host functions from
/// its embedder: the crates between never rebuild when a benchmark changes.
pub trait DomainOpener: Send + Sync {
    /// Opens the domain `name` with `options`; an unknown name is
    /// [`EnvError::UnknownDomain`], named before any data is looked for.
    fn open(&self, name: &str, options: &DomainOptions) -> Result<Arc<dyn Domain>, EnvError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worker protocol's JSON: the default mode is left out (jobs
    /// written before it existed read the same), another is named.
    #[test]
    fn the_sql_mode_travels_and_the_default_is_left_out() {
        let default = DomainOptions::default();
        let json = serde_json::to_value(&default).unwrap();
        assert_eq!(json, serde_json::json!({"data": null, "mysql_url": null}));
        let back: DomainOptions = serde_json::from_value(json).unwrap();
        assert_eq!(back, default);
        let lenient = DomainOptions {
            sql_mode: SqlMode::Lenient,
            ..DomainOptions::default()
        };
        let json = serde_json::to_value(&lenient).unwrap();
        assert_eq!(json["sql_mode"], "lenient");
        assert_eq!(
            serde_json::from_value::<DomainOptions>(json).unwrap(),
            lenient
        );
    }

    #[test]
    fn a_mode_is_parsed_by_its_name_and_an_unknown_one_is_named() {
        assert_eq!("lenient".parse(), Ok(SqlMode::Lenient));
        assert_eq!("mysql8".parse(), Ok(SqlMode::Mysql8));
        assert_eq!(
            "strict".parse::<SqlMode>().unwrap_err().to_string(),
            "unknown sql mode `strict` (expected mysql8 or lenient)"
        );
    }
}

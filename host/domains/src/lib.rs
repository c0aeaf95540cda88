//! The registry of benchmark domains: the one place that knows every
//! domain's name and what it needs to open, used by the command line, the
//! isolated worker processes, the service and the tests alike. Adding a
//! benchmark is its own crate (implementing `ecdysis-env`'s contract) and
//! one line here.
//!
//! It depends on the contract and the benchmark crates, on nothing above
//! them.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use ecdysis_agentbench_os as agentbench_os;
use ecdysis_dbbench as dbbench;
use ecdysis_dbbench::mysql8::SqlMode;
use ecdysis_env::{Domain, EnvError};
use ecdysis_tau2::{self as tau2, DataSource};

/// Names of the domains [`DomainOptions::open`] knows.
pub const DOMAINS: &[&str] = &[
    "tau2/airline",
    "tau2/retail",
    tau2::telecom::NAME,
    dbbench::NAME,
    agentbench_os::NAME,
];

/// Everything opening a domain needs (the command line's `--data`,
/// `--mysql-url`, `--sql-mode`). A worker process gets the parent's, so it
/// opens the domain the parent opened; it inherits the parent's working
/// directory and environment, so `None` resolves the same way.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DomainOptions {
    /// The τ² data (wheel, folder holding it, or extracted folder); `None`:
    /// [`locate`](ecdysis_tau2::locate)'s default. DBBench and OS interaction ship
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

impl DomainOptions {
    /// Opens the domain `name` with these options (the τ² data is located
    /// only for a τ² domain).
    pub fn open(&self, name: &str) -> Result<Arc<dyn Domain>, EnvError> {
        open_with(name, self, || tau2::locate(self.data.as_deref()))
    }
}

/// Opens the domain `name` with the τ² data already located (the other
/// options at their defaults).
pub fn open(name: &str, data: &DataSource) -> Result<Arc<dyn Domain>, EnvError> {
    open_with(name, &DomainOptions::default(), || Ok(data.clone()))
}

fn open_with(
    name: &str,
    options: &DomainOptions,
    tau2_data: impl FnOnce() -> Result<DataSource, EnvError>,
) -> Result<Arc<dyn Domain>, EnvError> {
    Ok(match name {
        "tau2/airline" => Arc::new(tau2::Tau2Domain::load(tau2::Which::Airline, &tau2_data()?)?),
        "tau2/retail" => Arc::new(tau2::Tau2Domain::load(tau2::Which::Retail, &tau2_data()?)?),
        tau2::telecom::NAME => Arc::new(tau2::telecom::TelecomDomain::load(&tau2_data()?)?),
        // Its data ships in this repository, not in the τ² wheel; it needs
        // a database server.
        dbbench::NAME => Arc::new(dbbench::open(dbbench::Options {
            mysql_url: options.mysql_url.clone(),
            limits: dbbench::Limits {
                sql_mode: options.sql_mode,
                ..Default::default()
            },
            ..Default::default()
        })?),
        // Its data ships in this repository too; its machines need only
        // bubblewrap.
        agentbench_os::NAME => Arc::new(agentbench_os::OsDomain::load(
            agentbench_os::Options::default(),
        )?),
        _ => {
            return Err(EnvError::UnknownDomain {
                name: name.to_string(),
                known: DOMAINS.iter().map(|d| d.to_string()).collect(),
            });
        }
    })
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
    fn an_unknown_domain_is_named_before_any_data_is_looked_for() {
        let options = DomainOptions {
            data: Some("/nonexistent".into()),
            ..DomainOptions::default()
        };
        let Err(e) = options.open("tau2/nowhere") else {
            panic!("opened")
        };
        assert!(
            matches!(e, EnvError::UnknownDomain { ref name, .. } if name == "tau2/nowhere"),
            "{e}"
        );
    }
}

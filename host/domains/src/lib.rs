//! The registry of benchmark domains: the one place that knows every
//! domain's name and what it needs to open, used by the command line, the
//! isolated worker processes, the service and the tests alike. Adding a
//! benchmark is its own crate (implementing `ecdysis-env`'s contract) and
//! one line here.
//!
//! It depends on the contract and the benchmark crates, on nothing above
//! them.

use std::sync::Arc;

use ecdysis_agentbench_os as agentbench_os;
use ecdysis_dbbench as dbbench;
use ecdysis_env::{Domain, DomainOpener, EnvError};
use ecdysis_tau2::{self as tau2, DataSource};

/// Names of the domains [`open_with_options`] knows.
pub const DOMAINS: &[&str] = &[
    "tau2/airline",
    "tau2/retail",
    tau2::telecom::NAME,
    dbbench::NAME,
    agentbench_os::NAME,
];

/// Everything opening a domain needs: the contract's, so that the runner's
/// workers and the service carry it without naming this crate.
pub use ecdysis_env::DomainOptions;

/// The registry as the contract's [`DomainOpener`]: what the binary hands
/// to the runner's worker processes and the service.
#[derive(Debug, Clone, Copy, Default)]
pub struct Registry;

impl DomainOpener for Registry {
    fn open(&self, name: &str, options: &DomainOptions) -> Result<Arc<dyn Domain>, EnvError> {
        open_with_options(name, options)
    }
}

/// Opens the domain `name` with `options` (the τ² data is located only for
/// a τ² domain).
pub fn open_with_options(name: &str, options: &DomainOptions) -> Result<Arc<dyn Domain>, EnvError> {
    open_with(name, options, || tau2::locate(options.data.as_deref()))
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

    #[test]
    fn an_unknown_domain_is_named_before_any_data_is_looked_for() {
        let options = DomainOptions {
            data: Some("/nonexistent".into()),
            ..DomainOptions::default()
        };
        let Err(e) = Registry.open("tau2/nowhere", &options) else {
            panic!("opened")
        };
        assert!(
            matches!(e, EnvError::UnknownDomain { ref name, .. } if name == "tau2/nowhere"),
            "{e}"
        );
    }
}

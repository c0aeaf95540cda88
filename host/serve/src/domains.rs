//! The domains a service process has opened, by name (loading τ² retail
//! parses its database; it is done once per process).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use ecdysis_env::{Domain, EnvError};
use ecdysis_runner::eval::RunError;
use ecdysis_runner::isolate::DomainSource;

/// Why the do-nothing floor of some tasks could not be worked out.
#[derive(Debug, thiserror::Error)]
pub enum FloorError {
    /// The domain could not be opened.
    #[error(transparent)]
    Domain(#[from] EnvError),
    /// A task's gold replay failed (an unknown task, or its evaluator
    /// failed).
    #[error(transparent)]
    Replay(#[from] RunError),
    /// The blocking task that replays them panicked or was cancelled.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
}

/// Domains opened once per process, shared by every evaluation.
pub struct Domains {
    source: DomainSource,
    open: Mutex<HashMap<String, Arc<dyn Domain>>>,
    /// Whether doing nothing solves a task (a summary's floor), by (domain,
    /// task): a pure function of the task that costs a gold replay and a
    /// database hash, so it is worked out once per process.
    idle_solves: Mutex<HashMap<(String, String), bool>>,
}

impl Domains {
    /// Open domains from `source` as they are asked for.
    pub fn new(source: DomainSource) -> Domains {
        Domains {
            source,
            open: Mutex::new(HashMap::new()),
            idle_solves: Mutex::new(HashMap::new()),
        }
    }

    /// The domain `name`, opened on first use (off the async threads).
    pub async fn get(&self, name: &str) -> Result<Arc<dyn Domain>, EnvError> {
        if let Some(d) = self
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
        {
            return Ok(d.clone());
        }
        let (source, owned) = (self.source.clone(), name.to_string());
        let domain = tokio::task::spawn_blocking(move || {
            ecdysis_domains::open_with_options(&owned, &source)
        })
        .await
        .map_err(|e| EnvError::UnknownDomain {
            name: format!("{name} ({e})"),
            known: vec![],
        })??;
        Ok(self
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(name.to_string())
            .or_insert(domain)
            .clone())
    }

    /// How many of `tasks` (each counted once) doing nothing solves: a
    /// run summary's floor ([`ecdysis_runner::eval::do_nothing_solved`]), from this
    /// process's memo where it has them.
    pub async fn floor_solved(&self, name: &str, tasks: &[String]) -> Result<u64, FloorError> {
        let unique: BTreeSet<&String> = tasks.iter().collect();
        let missing: Vec<String> = {
            let memo = self.idle_solves.lock().unwrap_or_else(|p| p.into_inner());
            unique
                .iter()
                .filter(|t| !memo.contains_key(&(name.to_string(), t.to_string())))
                .map(|t| t.to_string())
                .collect()
        };
        if !missing.is_empty() {
            let domain = self.get(name).await?;
            let found = tokio::task::spawn_blocking(move || {
                missing
                    .into_iter()
                    .map(|t| ecdysis_runner::eval::idle_solves(&*domain, &t).map(|s| (t, s)))
                    .collect::<Result<Vec<_>, _>>()
            })
            .await??;
            let mut memo = self.idle_solves.lock().unwrap_or_else(|p| p.into_inner());
            for (t, s) in found {
                memo.insert((name.to_string(), t), s);
            }
        }
        let memo = self.idle_solves.lock().unwrap_or_else(|p| p.into_inner());
        Ok(unique
            .iter()
            .filter(|t| memo.get(&(name.to_string(), t.to_string())) == Some(&true))
            .count() as u64)
    }
}

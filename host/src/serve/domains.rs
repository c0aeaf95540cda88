//! The domains a service process has opened, by name (loading τ² retail
//! parses its database; it is done once per process).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::env::{Domain, EnvError};
use crate::isolate::DomainSource;

/// Domains opened once per process, shared by every evaluation.
pub struct Domains {
    source: DomainSource,
    open: Mutex<HashMap<String, Arc<dyn Domain>>>,
}

impl Domains {
    /// Open domains from `source` as they are asked for.
    pub fn new(source: DomainSource) -> Domains {
        Domains {
            source,
            open: Mutex::new(HashMap::new()),
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
        let domain = tokio::task::spawn_blocking(move || source.open(&owned))
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
}

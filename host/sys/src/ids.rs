//! Identities every layer records in results files: here, at the bottom,
//! so that the store's export and the report read them with the same type
//! the runner writes them with.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Prefix of simulated model names.
pub const SIM_PREFIX: &str = "sim:";

/// A model name: `sim:<profile>` is one of the built-in simulated agents
/// (the offline testbed, never a benchmark result), anything else is the
/// model an OpenAI-style endpoint serves. Serialised as the bare name, so
/// results files written before this type existed read unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ModelId(String);

/// What a [`ModelId`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind<'a> {
    /// A simulated agent: the profile name after `sim:`.
    Simulated(&'a str),
    /// A model served by an endpoint.
    Endpoint(&'a str),
}

impl ModelId {
    /// The id of `name` (leading and trailing whitespace removed).
    pub fn new(name: impl Into<String>) -> Self {
        let name: String = name.into();
        match name.trim() {
            t if t.len() == name.len() => Self(name),
            t => Self(t.to_owned()),
        }
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether it names a simulated model or an endpoint's.
    pub fn kind(&self) -> ModelKind<'_> {
        match self.0.strip_prefix(SIM_PREFIX) {
            Some(profile) => ModelKind::Simulated(profile),
            None => ModelKind::Endpoint(&self.0),
        }
    }

    /// A simulated testbed agent (`sim:<profile>`).
    pub fn is_simulated(&self) -> bool {
        matches!(self.kind(), ModelKind::Simulated(_))
    }

    /// Whether `name` would be a simulated model's id (for names not yet
    /// parsed, such as a flag's raw value).
    pub fn names_simulated(name: &str) -> bool {
        name.trim().starts_with(SIM_PREFIX)
    }

    /// The name as a path component (`sim-mixed`, `org-model`): the
    /// characters a file name cannot hold replaced by `-`.
    pub fn file_stem(&self) -> String {
        self.0.replace([':', '/', '\\'], "-")
    }
}

impl fmt::Display for ModelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for ModelId {
    fn from(name: String) -> Self {
        Self::new(name)
    }
}

impl From<&str> for ModelId {
    fn from(name: &str) -> Self {
        Self::new(name)
    }
}

impl std::str::FromStr for ModelId {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self::new(s))
    }
}

impl AsRef<str> for ModelId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for ModelId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for ModelId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sim_prefix_names_a_simulated_profile_and_anything_else_an_endpoint() {
        assert_eq!(
            ModelId::new("sim:mixed").kind(),
            ModelKind::Simulated("mixed")
        );
        assert_eq!(
            ModelId::new(" qwen2.5-coder ").kind(),
            ModelKind::Endpoint("qwen2.5-coder")
        );
        // The prefix is case-sensitive, as the profile lookup is.
        assert!(!ModelId::new("SIM:mixed").is_simulated());
        assert!(!ModelId::new("org/sim:x").is_simulated());
        assert!(ModelId::names_simulated(" sim:oracle"));
    }

    #[test]
    fn serialises_as_the_bare_name_and_makes_a_file_stem() {
        let id = ModelId::new("org/model:q4");
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"org/model:q4\"");
        let back: ModelId = serde_json::from_str("\"sim:texter\"").unwrap();
        assert!(back.is_simulated());
        assert_eq!(id.file_stem(), "org-model-q4");
    }
}

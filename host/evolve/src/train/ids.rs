//! Who diagnosed and who edited, as a training run's files name them.
//!
//! Both are serialised as the text earlier versions wrote (`heuristic`,
//! `fdcr(k=1): analyst …`; `rules`, `editor:<model>`, …), so existing
//! `config.json`, transcripts and `experiment.json` files read unchanged
//! and a resume compares like with like.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Who turns failure groups into change specs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum DiagnoserId {
    /// The offline rules over the recorded error text.
    #[default]
    Heuristic,
    /// The FDCR roles (Failure-Driven Collaborative Refinement), with their
    /// models and rounds as described, e.g. `fdcr(k=1): analyst m, …`.
    Fdcr(String),
}

impl DiagnoserId {
    const HEURISTIC: &'static str = "heuristic";

    /// Whether the FDCR roles diagnose.
    pub fn is_fdcr(&self) -> bool {
        matches!(self, DiagnoserId::Fdcr(_))
    }
}

impl From<String> for DiagnoserId {
    fn from(s: String) -> Self {
        // Files written before the field existed hold nothing: the
        // heuristic was then the only diagnoser.
        if s == Self::HEURISTIC || s.is_empty() {
            DiagnoserId::Heuristic
        } else {
            DiagnoserId::Fdcr(s)
        }
    }
}

impl From<&str> for DiagnoserId {
    fn from(s: &str) -> Self {
        DiagnoserId::from(s.to_string())
    }
}

impl From<DiagnoserId> for String {
    fn from(d: DiagnoserId) -> String {
        d.to_string()
    }
}

impl fmt::Display for DiagnoserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiagnoserId::Heuristic => f.write_str(Self::HEURISTIC),
            DiagnoserId::Fdcr(described) => f.write_str(described),
        }
    }
}

/// Who edits a candidate's source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum CoderId {
    /// The offline rule coder (no model).
    #[default]
    Rules,
    /// The built-in editor coder with this model.
    Editor(String),
    /// The table coder with this model.
    Tables(String),
    /// The whole-file coder with this model.
    WholeFile(String),
    /// An external coding agent: this program.
    External(String),
    /// A name this version does not know, kept as written.
    Other(String),
}

impl CoderId {
    const RULES: &'static str = "rules";
    const EDITOR: &'static str = "editor:";
    const TABLES: &'static str = "tables:";
    const WHOLE_FILE: &'static str = "whole-file:";
    const EXTERNAL: &'static str = "external:";

    /// Whether a model or program did the edits (not the offline rules):
    /// its calls took real time, not the simulated coder latency.
    pub fn is_real(&self) -> bool {
        !matches!(self, CoderId::Rules)
    }
}

impl From<String> for CoderId {
    fn from(s: String) -> Self {
        if s == Self::RULES || s.is_empty() {
            return CoderId::Rules;
        }
        let tagged = [
            (Self::EDITOR, CoderId::Editor as fn(String) -> CoderId),
            (Self::TABLES, CoderId::Tables),
            (Self::WHOLE_FILE, CoderId::WholeFile),
            (Self::EXTERNAL, CoderId::External),
        ];
        for (prefix, make) in tagged {
            if let Some(rest) = s.strip_prefix(prefix) {
                return make(rest.to_string());
            }
        }
        CoderId::Other(s)
    }
}

impl From<&str> for CoderId {
    fn from(s: &str) -> Self {
        CoderId::from(s.to_string())
    }
}

impl From<CoderId> for String {
    fn from(c: CoderId) -> String {
        c.to_string()
    }
}

impl fmt::Display for CoderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoderId::Rules => f.write_str(Self::RULES),
            CoderId::Editor(m) => write!(f, "{}{m}", Self::EDITOR),
            CoderId::Tables(m) => write!(f, "{}{m}", Self::TABLES),
            CoderId::WholeFile(m) => write!(f, "{}{m}", Self::WHOLE_FILE),
            CoderId::External(p) => write!(f, "{}{p}", Self::EXTERNAL),
            CoderId::Other(s) => f.write_str(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_text_round_trips_through_the_types() {
        for text in [
            "rules",
            "editor:qwen2.5-coder-1.5b-instruct",
            "tables:m",
            "whole-file:m",
            "external:/usr/bin/aider --yes",
            "something-else",
        ] {
            let id = CoderId::from(text);
            assert_eq!(id.to_string(), text);
            let json = serde_json::to_string(&id).unwrap();
            assert_eq!(json, serde_json::to_string(text).unwrap());
            assert_eq!(serde_json::from_str::<CoderId>(&json).unwrap(), id);
        }
        assert_eq!(CoderId::from("tables:m"), CoderId::Tables("m".into()));
        assert_eq!(
            CoderId::from("whole-file:m"),
            CoderId::WholeFile("m".into())
        );
        assert_eq!(CoderId::from("editor:"), CoderId::Editor(String::new()));
        assert!(!CoderId::from("rules").is_real());
        assert!(CoderId::from("external:x").is_real());
        for text in [
            "heuristic",
            "fdcr(k=1): analyst a, critic b, engineer c, moderator d",
        ] {
            let id = DiagnoserId::from(text.to_string());
            assert_eq!(id.to_string(), text);
            assert_eq!(
                serde_json::from_str::<DiagnoserId>(&serde_json::to_string(&id).unwrap()).unwrap(),
                id
            );
        }
        assert!(DiagnoserId::from("fdcr".to_string()).is_fdcr());
        assert!(!DiagnoserId::from("heuristic".to_string()).is_fdcr());
    }
}

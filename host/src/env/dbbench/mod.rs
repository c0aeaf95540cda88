//! AgentBench's DBBench: SQL tasks against a real MariaDB configured like
//! MySQL 8, scored exactly as the original.

pub mod checker;
pub mod pyval;
mod unicode;

//! AgentBench's OS interaction (`agentbench/os`): tasks answered or done
//! with a real shell, each episode in its own sandboxed machine
//! ([`machine`]), scored as upstream scores them (its checker scripts run
//! in the same machine after the episode).

pub mod machine;
pub mod task;

#[cfg(test)]
mod tests;

pub use machine::{Machine, MachineError, MachineLimits};
pub use task::{Judge, Language, Script, Task};

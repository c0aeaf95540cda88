//! The agent loop: one episode of a model, a user simulator, an environment
//! and (optionally) a harness, recorded as a trajectory.

pub mod boundary;
mod episode;
mod record;
mod session;
mod view;

pub use episode::{AGENT_STOP, EpisodeSetup, run_episode, run_episode_to_state};
pub use record::{CallSource, EndReason, Entry, EpisodeRecord, RoleUsage, Withheld};
pub use session::{CallPlace, HarnessSession, HookFailure, HookOutcome, HookRecord};
pub use view::{SharedEnv, SharedEnvView};

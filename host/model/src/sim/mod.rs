//! Simulated agent models (`sim:<profile>`): the offline testbed.
//!
//! **Testbed only.** A [`SimAgent`] follows a task's gold plan
//! ([`TestbedPlan`], derived from the task's hidden oracle) and injects the
//! quirks of a declared [`SimProfile`], deterministically from a seed. Its
//! episodes measure the evolution machinery, never a benchmark: the model
//! name is always `sim:<profile>`.
//!
//! Every response carries its ground truth in [`ChatResponse::testbed`]
//! ([`TestbedNote`]): which quirks shaped the turn, each labelled
//! [`QuirkKind::Systematic`] (an interface mismatch a harness may fix) or
//! [`QuirkKind::ModelSpecific`] (the model's own limit, which a harness
//! should not contort itself for), and which were corrected by feedback
//! that stated the fix.
//!
//! | quirk | kind | eligible step | effect |
//! |---|---|---|---|
//! | `text_call` | systematic | every call | fenced ```json `{"name","arguments"}` in the text, no structured call |
//! | `drop_hash` | systematic | a string argument starting with `#` | the `#` is dropped |
//! | `numbers_as_strings` | systematic | a numeric argument | numbers sent as strings |
//! | `tool_alias` | systematic | a tool with an alias in the domain's table (and no real tool of that name) | the alias is called |
//! | `repeat_failing_call` | systematic | a failed call | the identical call is repeated once |
//! | `skip_precondition` | systematic | a read-only step right before a write step | the read step is skipped |
//! | `wrong_variant` | model-specific | `item_ids`/`new_item_ids` | one entry replaced by another item id seen in tool results |
//! | `early_stop` | model-specific | the last step | stops before it (final message instead) |
//! | `miscount` | model-specific | an amount-like number (`amount`, `total`, `count`, `baggages`…) | ±1 |
//!
//! Each quirk fires per eligible step with the profile's probability. A
//! systematic quirk whose fix cue (see [`cues`]) is visible is prevented,
//! or, after a failed call, corrected on a retry, with the profile's
//! `correction_probability`. Nothing corrects a model-specific quirk.
//!
//! [`ChatResponse::testbed`]: crate::ChatResponse::testbed

mod agent;
pub mod cues;
mod mutate;
mod note;
mod plan;
mod profile;
mod rng;

pub use agent::{CLOSING_QUESTION, GOODBYE, SimAgent, is_failed_result};
pub use note::{CueSource, QuirkCorrected, QuirkFired, SimAction, TestbedNote};
pub mod cpu;
pub use plan::{PlannedCall, TestbedPlan, is_read_only_tool};
pub use profile::{Quirk, QuirkKind, QuirkRates, SIM_PREFIX, SimProfile, UnknownProfile};
pub use rng::episode_seed;

#[cfg(test)]
mod tests;

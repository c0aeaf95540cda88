//! Trajectory regulation, after every step.
//!
//! Rules (one per file), all feeding one answer:
//! - [`reply`]: a step ends the agent's reply (for realization's
//!   finishing-call rules).
//! - [`authenticated_user`]: remember who the agent authenticated (for the
//!   owner gate).
//! - [`changed_records`]: remember which records the agent changed (for the
//!   cancellation gate).
//! - [`gate_explanations`]: append realize's explanation to the error of a
//!   call it predicted to fail.
//! - [`repeated_failure`]: the identical failing call again → say what to
//!   change; stop only when clearly stuck.
//! - [`repeated_success`]: the identical call returning the same result
//!   several times in a row → say it is already known.
//! - [`error_streak`]: one tool failing several times in a row.
//! - [`stall`]: no successful tool call for many turns, or the same message
//!   twice.
//! - [`budget`]: few steps or tool errors left.
//! - [`round_limit`]: few turns left in a domain with a turn limit.
//!
//! Notes for a tool-results step are appended to its last result
//! (`annotate`); otherwise they are shown before the model's next turn
//! (`inject`). A stop wins over everything.

pub mod authenticated_user;
pub mod budget;
pub mod changed_records;
pub mod error_streak;
pub mod gate_explanations;
pub mod repeated_failure;
pub mod repeated_success;
pub mod reply;
pub mod round_limit;
pub mod stall;

use crate::episode::Harness;
use crate::types::{Regulation, Step, StepKind};

/// Counters kept across steps.
#[derive(Debug, Default)]
pub struct State {
    pub repeated: repeated_failure::State,
    pub repeated_success: repeated_success::State,
    pub streak: error_streak::State,
    pub stall: stall::State,
    pub budget: budget::State,
    pub rounds: round_limit::State,
}

pub fn regulate(h: &mut Harness, step: &Step) -> Regulation {
    reply::observe(&mut h.reply, &mut h.failed, step);
    authenticated_user::observe(&mut h.authenticated, step);
    changed_records::observe(&h.tools, &mut h.changed, step);
    let mut notes: Vec<String> = Vec::new();
    notes.extend(gate_explanations::take(&mut h.pending_explanations, step));
    let keys = repeated_failure::keys(step);
    let repeated = repeated_failure::check(&mut h.regulation.repeated, step, &keys);
    if let repeated_failure::Finding::Stop(reason) = &repeated {
        return Regulation::Stop(reason.clone());
    }
    if let repeated_failure::Finding::Note(note) = repeated {
        notes.push(note);
    }
    notes.extend(repeated_success::check(
        &mut h.regulation.repeated_success,
        step,
        &keys,
    ));
    notes.extend(error_streak::check(
        &mut h.regulation.streak,
        step,
        &h.domain,
    ));
    notes.extend(stall::check(&mut h.regulation.stall, step));
    notes.extend(budget::check(
        &mut h.regulation.budget,
        step,
        h.max_steps,
        h.max_errors,
    ));
    notes.extend(round_limit::check(
        &mut h.regulation.rounds,
        step,
        &h.domain,
    ));
    if notes.is_empty() {
        return Regulation::Continue;
    }
    let text = notes.join("\n");
    if step.kind == StepKind::ToolResults && !step.outcomes.is_empty() {
        Regulation::Annotate(text)
    } else {
        Regulation::Inject(text)
    }
}

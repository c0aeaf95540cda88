//! Ground truth a simulated agent attaches to every response.

use serde::{Deserialize, Serialize};

use crate::sim::profile::{Quirk, QuirkKind};

/// **Testbed ground truth**, attached to every [`ChatResponse`] of a
/// simulated agent (`ChatResponse::testbed`): which quirks shaped this turn
/// and which were corrected by a fix the conversation stated. Evaluation uses
/// it to tell harness edits that target systematic failures from those that
/// accommodate model-specific ones. Never shown to a harness.
///
/// [`ChatResponse`]: crate::ChatResponse
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TestbedNote {
    /// `sim:<profile>`.
    pub model: String,
    /// What this turn is.
    pub action: SimAction,
    /// The plan step this turn works on (`None` for the final message and
    /// the goodbye).
    pub step_index: Option<usize>,
    /// Quirks that shaped this turn's output (a quirk still active on a
    /// retried step is listed again).
    pub quirks: Vec<QuirkFired>,
    /// Quirks a visible fix cue corrected on this turn: either prevented
    /// before the step's first call, or fixed on the retry after a failure.
    pub corrected: Vec<QuirkCorrected>,
}

/// What a simulated turn does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SimAction {
    /// A (possibly quirky) attempt at a plan step.
    #[default]
    Call,
    /// A message asking the user to do a plan step on their own device (a
    /// dual-control domain's user action).
    AskUser,
    /// The message with the communicate strings and the closing question.
    Final,
    /// A goodbye after the final message.
    Goodbye,
}

/// A quirk that shaped a turn's output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuirkFired {
    /// The quirk that fired.
    pub name: Quirk,
    /// Whether a harness can legitimately fix it.
    pub kind: QuirkKind,
    /// Plan step the quirk belongs to (for `skip_precondition`, the skipped
    /// read step).
    pub step_index: usize,
}

/// A quirk a visible fix cue corrected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuirkCorrected {
    /// The quirk that was corrected.
    pub name: Quirk,
    /// Whether a harness can legitimately fix it.
    pub kind: QuirkKind,
    /// Plan step the quirk belongs to.
    pub step_index: usize,
    /// Where the cue was read.
    pub source: CueSource,
    /// True when the quirk never showed (a cue was visible before the
    /// step's first attempt); false when a call already failed with it.
    pub prevented: bool,
}

/// Where a fix cue was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CueSource {
    /// The description of the tool the step calls (as the request shows it,
    /// i.e. after the harness's contract rewrite).
    ToolDescription,
    /// A paragraph of the first system message that is not in the base
    /// prompt (skills guidance, a contract rewrite); see
    /// [`SimAgent::with_base_prompt`](crate::sim::SimAgent::with_base_prompt).
    SystemPrompt,
    /// A tool result (environment error, harness block, annotation).
    ToolResult,
    /// A user- or system-role message after the system prompt (injected
    /// guidance, recovery messages, notes, the user's words).
    Message,
}

impl QuirkFired {
    /// The firing of `name` on plan step `step_index` (its kind filled in).
    pub fn new(name: Quirk, step_index: usize) -> Self {
        Self {
            name,
            kind: name.kind(),
            step_index,
        }
    }
}

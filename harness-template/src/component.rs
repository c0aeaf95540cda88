//! WIT glue: binds the `ecdysis:harness` world and forwards each hook.

use std::cell::Cell;

use exports::ecdysis::harness::hooks::{
    ActionDecision, AgentAction, ContractInput, ContractOutput, EpisodeInfo, Guest, GuestEpisode,
    Guidance, Regulation, StepReport, TaskView,
};

wit_bindgen::generate!({
    world: "harness",
    path: "../wit",
});

struct Harness;

/// Per-episode state: the host constructs one per episode.
struct Episode {
    max_steps: u32,
    warned_budget: Cell<bool>,
}

impl Guest for Harness {
    type Episode = Episode;
}

impl GuestEpisode for Episode {
    fn new(info: EpisodeInfo) -> Self {
        Episode {
            max_steps: info.max_steps,
            warned_budget: Cell::new(false),
        }
    }

    fn contract(&self, input: ContractInput) -> ContractOutput {
        ContractOutput {
            system_prompt: input.system_prompt,
            tool_descriptions: Vec::new(),
        }
    }

    fn skills(&self, _view: TaskView) -> Vec<Guidance> {
        Vec::new()
    }

    fn realize(&self, _action: AgentAction) -> ActionDecision {
        ActionDecision::Proceed
    }

    fn regulate(&self, report: StepReport) -> Regulation {
        if !self.warned_budget.get() && crate::low_budget(report.steps_left, self.max_steps) {
            self.warned_budget.set(true);
            return Regulation::Inject(format!(
                "Only {} steps remain in this conversation: finish the user's request now.",
                report.steps_left
            ));
        }
        Regulation::Continue
    }
}

export!(Harness);

//! The pass-through harness ("Direct" baseline): every hook returns its
//! neutral answer, so the model sees the environment exactly as it is. Used
//! as the control in experiments and to measure the sandbox's own overhead.

use exports::ecdysis::harness::hooks::{
    ActionDecision, AgentAction, ContractInput, ContractOutput, EpisodeInfo, Guest, GuestEpisode,
    Guidance, Regulation, StepReport, TaskView,
};

wit_bindgen::generate!({
    world: "harness",
    path: "../../wit",
});

struct Direct;

struct Episode;

impl Guest for Direct {
    type Episode = Episode;
}

impl GuestEpisode for Episode {
    fn new(_info: EpisodeInfo) -> Self {
        Episode
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

    fn regulate(&self, _report: StepReport) -> Regulation {
        Regulation::Continue
    }
}

export!(Direct);

//! Example harness: a "read-only mode". It learns from the environment
//! contract which tools mutate state and blocks every call to them with an
//! explanation, so an operator can let an agent explore safely. It also
//! shows the pattern every real harness uses: per-episode state kept in the
//! `episode` resource, filled by one hook and read by another.

use std::cell::RefCell;

use exports::ecdysis::harness::hooks::{
    ActionDecision, AgentAction, ContractInput, ContractOutput, EpisodeInfo, Guest, GuestEpisode,
    Guidance, Regulation, StepReport, TaskView,
};

wit_bindgen::generate!({
    world: "harness",
    path: "../../wit",
});

struct ReadOnly;

struct Episode {
    /// Names of the tools that change state, learned in `contract`.
    mutating: RefCell<Vec<String>>,
}

impl Guest for ReadOnly {
    type Episode = Episode;
}

impl GuestEpisode for Episode {
    fn new(_info: EpisodeInfo) -> Self {
        Episode {
            mutating: RefCell::new(Vec::new()),
        }
    }

    fn contract(&self, input: ContractInput) -> ContractOutput {
        *self.mutating.borrow_mut() = input
            .tools
            .iter()
            .filter(|t| t.mutates)
            .map(|t| t.name.clone())
            .collect();
        ContractOutput {
            system_prompt: input.system_prompt,
            tool_descriptions: Vec::new(),
        }
    }

    fn skills(&self, _view: TaskView) -> Vec<Guidance> {
        Vec::new()
    }

    fn realize(&self, action: AgentAction) -> ActionDecision {
        match action {
            AgentAction::Call(call) if self.mutating.borrow().contains(&call.name) => {
                ecdysis::harness::host_log::log(
                    ecdysis::harness::host_log::Level::Info,
                    &format!("blocked {}", call.name),
                );
                ActionDecision::Block(format!(
                    "`{}` changes the account and this session is read-only. Tell the user what you would do instead of doing it.",
                    call.name
                ))
            }
            _ => ActionDecision::Proceed,
        }
    }

    fn regulate(&self, _report: StepReport) -> Regulation {
        Regulation::Continue
    }
}

export!(ReadOnly);

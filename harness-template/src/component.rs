//! WIT glue: binds the `ecdysis:harness` world and forwards each hook to
//! [`crate::Harness`], converting types at the boundary.

use std::cell::RefCell;

use ecdysis::harness::types::{StepKind, ToolCall, ToolDescription};
use exports::ecdysis::harness::hooks::{
    ActionDecision, AgentAction, ContractInput, ContractOutput, EpisodeInfo, Guest, GuestEpisode,
    Guidance, Regulation, StepReport, TaskView,
};

use crate::types;
use crate::view::EnvView;

wit_bindgen::generate!({
    world: "harness",
    path: "../wit",
});

struct Component;

/// One episode: the host constructs one per episode.
struct Episode {
    harness: RefCell<crate::Harness>,
}

/// The host's read-only env view.
struct HostView;

impl EnvView for HostView {
    fn read(&mut self, tool: &str, arguments: &str) -> Result<String, String> {
        use ecdysis::harness::env_view::{ViewError, call_read_only};
        call_read_only(tool, arguments).map_err(|e| match e {
            ViewError::UnknownTool(m)
            | ViewError::MutatingTool(m)
            | ViewError::InvalidArguments(m)
            | ViewError::ToolError(m) => m,
        })
    }
}

fn to_call(c: ToolCall) -> types::Call {
    types::Call {
        id: c.id,
        name: c.name,
        arguments: c.arguments,
    }
}

fn from_call(c: types::Call) -> ToolCall {
    ToolCall {
        id: c.id,
        name: c.name,
        arguments: c.arguments,
    }
}

impl Guest for Component {
    type Episode = Episode;
}

impl GuestEpisode for Episode {
    fn new(info: EpisodeInfo) -> Self {
        Episode {
            harness: RefCell::new(crate::Harness::new(
                &info.domain,
                info.max_steps,
                info.max_errors,
            )),
        }
    }

    fn contract(&self, input: ContractInput) -> ContractOutput {
        let tools = input
            .tools
            .into_iter()
            .map(|t| types::ToolSpec {
                name: t.name,
                description: t.description,
                parameters: t.parameters,
                mutates: t.mutates,
            })
            .collect();
        let out = self
            .harness
            .borrow_mut()
            .contract(&input.domain, &input.system_prompt, tools);
        ContractOutput {
            system_prompt: out.system_prompt,
            tool_descriptions: out
                .descriptions
                .into_iter()
                .map(|(name, description)| ToolDescription { name, description })
                .collect(),
        }
    }

    fn skills(&self, view: TaskView) -> Vec<Guidance> {
        self.harness
            .borrow_mut()
            .skills(&view.domain, &view.first_user_message)
            .into_iter()
            .map(|g| Guidance {
                title: g.title,
                text: g.text,
            })
            .collect()
    }

    fn realize(&self, action: AgentAction) -> ActionDecision {
        let action = match action {
            AgentAction::Call(c) => types::Action::Call(to_call(c)),
            AgentAction::Text(t) => types::Action::Text(t),
        };
        match self.harness.borrow_mut().realize(&mut HostView, action) {
            types::Decision::Proceed => ActionDecision::Proceed,
            types::Decision::Execute(c) => ActionDecision::Execute(from_call(c)),
            types::Decision::Block(text) => ActionDecision::Block(text),
            types::Decision::Realize(calls) => {
                ActionDecision::Realize(calls.into_iter().map(from_call).collect())
            }
        }
    }

    fn regulate(&self, report: StepReport) -> Regulation {
        let step = types::Step {
            step: report.step,
            steps_left: report.steps_left,
            errors_left: report.errors_left,
            kind: match report.kind {
                StepKind::AgentMessage => types::StepKind::AgentMessage,
                StepKind::ToolResults => types::StepKind::ToolResults,
                StepKind::UserMessage => types::StepKind::UserMessage,
            },
            text: report.text,
            outcomes: report
                .outcomes
                .into_iter()
                .map(|o| types::Outcome {
                    call: to_call(o.call),
                    content: o.content,
                    error: o.error,
                    blocked: o.blocked,
                })
                .collect(),
        };
        match self.harness.borrow_mut().regulate(&step) {
            types::Regulation::Continue => Regulation::Continue,
            types::Regulation::Annotate(t) => Regulation::Annotate(t),
            types::Regulation::Inject(t) => Regulation::Inject(t),
            types::Regulation::ForceCall(c) => Regulation::ForceCall(from_call(c)),
            types::Regulation::Stop(t) => Regulation::Stop(t),
        }
    }
}

export!(Component);

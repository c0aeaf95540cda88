//! Per-episode state and the four hooks in plain Rust. The WIT glue
//! (`component.rs`) owns one [`Harness`] per episode resource.

use crate::types::{Action, Call, ContractOut, Decision, Guide, Regulation, Step, ToolSpec};
use crate::view::{EnvView, Tools};
use crate::{contract, realize, regulate, skills, text};

/// Everything the harness remembers during one episode. Filled only from
/// agent-visible inputs: the contract (policy, tools), the opening message,
/// proposed calls and their results.
#[derive(Debug, Default)]
pub struct Harness {
    /// Short domain name (`retail`, `airline`).
    pub domain: String,
    pub max_steps: u32,
    pub max_errors: u32,
    /// The tools of the contract (empty until `contract` ran).
    pub tools: Tools,
    /// "Now" from the policy text, in minutes (see `contract::clock`).
    pub now_minutes: Option<i64>,
    /// User ids the agent authenticated (successful find-user lookups).
    pub authenticated: Vec<String>,
    /// Ids of records (reservations, orders) the agent changed successfully
    /// in this episode.
    pub changed: Vec<String>,
    /// Explanations computed by gates for calls the environment is about to
    /// reject, by call id; `regulate` appends them to the error.
    pub pending_explanations: Vec<(String, String)>,
    /// The user's first message (the task as stated), from `skills`.
    pub opening: String,
    /// The calls of the current reply realized so far, as they will run.
    pub reply: Vec<Call>,
    /// The tools whose calls failed (an environment error) in the last step.
    pub failed: Vec<String>,
    /// The tables of the primitives that are off by default.
    pub primitives: realize::Primitives,
    /// Counters of the regulation layer.
    pub regulation: regulate::State,
}

impl Harness {
    pub fn new(domain: &str, max_steps: u32, max_errors: u32) -> Self {
        Harness {
            domain: text::short_domain(domain).to_string(),
            max_steps,
            max_errors,
            ..Harness::default()
        }
    }

    /// Environment contract.
    pub fn contract(
        &mut self,
        domain: &str,
        system_prompt: &str,
        tools: Vec<ToolSpec>,
    ) -> ContractOut {
        if !domain.is_empty() {
            self.domain = text::short_domain(domain).to_string();
        }
        self.now_minutes = contract::clock::now_from_policy(system_prompt);
        let out = contract::apply(&self.domain, system_prompt, &tools);
        self.tools = Tools::new(tools);
        out
    }

    /// Procedural skills.
    pub fn skills(&mut self, domain: &str, first_user_message: &str) -> Vec<Guide> {
        self.opening = first_user_message.to_string();
        let domain = text::short_domain(domain);
        let domain = if domain.is_empty() {
            self.domain.clone()
        } else {
            domain.to_string()
        };
        skills::select(&domain, first_user_message)
    }

    /// Action realization.
    pub fn realize(&mut self, view: &mut dyn EnvView, action: Action) -> Decision {
        realize::realize(self, view, action)
    }

    /// Trajectory regulation.
    pub fn regulate(&mut self, step: &Step) -> Regulation {
        regulate::regulate(self, step)
    }
}

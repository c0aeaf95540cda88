//! Plain Rust mirrors of the WIT types, so the rules run (and are tested)
//! natively; `component.rs` converts at the boundary.

/// A tool as the environment declares it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments, as text.
    pub parameters: String,
    pub mutates: bool,
}

/// A structured tool call; `arguments` is the text of a JSON object.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

impl Call {
    pub fn new(id: &str, name: &str, arguments: &str) -> Self {
        Call {
            id: id.to_string(),
            name: name.to_string(),
            arguments: arguments.to_string(),
        }
    }
}

/// What the agent proposed.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Call(Call),
    Text(String),
}

/// The realize hook's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Proceed,
    Execute(Call),
    Block(String),
    Realize(Vec<Call>),
}

/// One tool call of a step and its result.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub call: Call,
    pub content: String,
    pub error: bool,
    pub blocked: bool,
}

impl Outcome {
    /// Failed: an environment error or a harness block.
    pub fn failed(&self) -> bool {
        self.error || self.blocked
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    AgentMessage,
    ToolResults,
    UserMessage,
}

/// The regulate hook's input.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub step: u32,
    pub steps_left: u32,
    pub errors_left: u32,
    pub kind: StepKind,
    pub text: Option<String>,
    pub outcomes: Vec<Outcome>,
}

/// The regulate hook's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Regulation {
    Continue,
    Annotate(String),
    Inject(String),
    ForceCall(Call),
    Stop(String),
}

/// A guidance block of the skills hook.
#[derive(Debug, Clone, PartialEq)]
pub struct Guide {
    pub title: String,
    pub text: String,
}

/// The contract hook's answer: the system prompt and changed descriptions.
#[derive(Debug, Clone, PartialEq)]
pub struct ContractOut {
    pub system_prompt: String,
    /// (tool name, full new description).
    pub descriptions: Vec<(String, String)>,
}

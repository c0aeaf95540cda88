//! [`LlmUser`]: an LLM plays the customer.

use std::sync::Arc;

use crate::types::{ChatMessage, ChatModel, ChatRequest, FunctionTool, SamplingArgs};
use crate::user::{Speaker, UserFuture, UserSimError, UserSimulator, UserTurn, Utterance};

/// The simulation guidelines, in our own words (`guidelines.md`).
pub const USER_GUIDELINES: &str = include_str!("guidelines.md");

/// What a user with device tools is told besides [`USER_GUIDELINES`]
/// (`guidelines_device.md`).
pub const DEVICE_GUIDELINES: &str = include_str!("guidelines_device.md");

/// Sent as the conversation when the user must open it and nothing has been
/// said yet (a model needs at least one message to answer).
const OPENING_CUE: &str = "(The agent is waiting for you to write your first message.)";

/// The scenario inside `<scenario>…</scenario>` if `prompt` has those tags
/// (as env's `Oracle::user_system_prompt()` does), else `prompt` itself.
/// Lets a caller pass only the scenario to [`LlmUser::new`], whose
/// guidelines replace the ones in the prompt.
pub fn scenario_from_prompt(prompt: &str) -> &str {
    match (prompt.find("<scenario>"), prompt.rfind("</scenario>")) {
        (Some(start), Some(end)) if start + "<scenario>".len() <= end => {
            prompt[start + "<scenario>".len()..end].trim()
        }
        _ => prompt,
    }
}

/// The τ²-style LLM user. The system prompt is [`USER_GUIDELINES`] followed
/// by the scenario in `<scenario>` tags; roles are flipped for the model
/// (the agent's messages are `user` turns, the simulated user's own earlier
/// messages are `assistant` turns). With device tools
/// ([`LlmUser::with_device_tools`]) the request offers them, the user's
/// device calls are its `assistant` tool calls and the device's answers
/// `tool` messages.
pub struct LlmUser {
    model: Arc<dyn ChatModel>,
    system_prompt: String,
    sampling: SamplingArgs,
    cache_salt: Option<String>,
    tools: Arc<[FunctionTool]>,
}

impl LlmUser {
    /// `scenario` is the task's user scenario text (not the guidelines).
    pub fn new(model: Arc<dyn ChatModel>, scenario: impl Into<String>) -> Self {
        let scenario = scenario.into();
        Self {
            model,
            system_prompt: format!(
                "{}\n\n<scenario>\n{}\n</scenario>",
                USER_GUIDELINES.trim_end(),
                scenario.trim()
            ),
            sampling: SamplingArgs::default(),
            cache_salt: None,
            tools: Arc::from(Vec::new()),
        }
    }

    /// Gives the user tools acting on their own device (τ² telecom's
    /// phone), with [`DEVICE_GUIDELINES`] added to the guidelines. No tools
    /// leaves the user as it was.
    pub fn with_device_tools(mut self, tools: Vec<FunctionTool>) -> Self {
        if tools.is_empty() {
            return self;
        }
        if let Some(at) = self.system_prompt.find("\n\n<scenario>") {
            self.system_prompt
                .insert_str(at, &format!("\n\n{}", DEVICE_GUIDELINES.trim_end()));
        }
        self.tools = Arc::from(tools);
        self
    }

    /// Sampling arguments of the simulator's calls.
    pub fn with_sampling(mut self, sampling: SamplingArgs) -> Self {
        self.sampling = sampling;
        self
    }

    /// Distinct per trial, so pass^k trials don't replay each other from the
    /// response cache.
    pub fn with_cache_salt(mut self, salt: impl Into<String>) -> Self {
        self.cache_salt = Some(salt.into());
        self
    }

    /// The guidelines plus the scenario, as sent first in every request.
    pub fn system_prompt(&self) -> &str {
        &self.system_prompt
    }

    /// The request sent to the simulator model for `conversation`.
    pub fn build_request(&self, conversation: &[Utterance]) -> ChatRequest {
        let mut messages = vec![ChatMessage::system(self.system_prompt.clone())];
        if conversation.is_empty() {
            messages.push(ChatMessage::user(OPENING_CUE));
        }
        messages.extend(conversation.iter().map(|u| match u.speaker {
            Speaker::Agent => ChatMessage::user(u.text.clone()),
            Speaker::User if !u.calls.is_empty() => {
                ChatMessage::assistant_with_tool_calls(None, u.calls.clone())
            }
            Speaker::User => ChatMessage::assistant(u.text.clone()),
            Speaker::Device => {
                ChatMessage::tool(u.call_id.clone().unwrap_or_default(), u.text.clone())
            }
        }));
        let mut request = ChatRequest::new(messages).with_sampling(self.sampling.clone());
        if !self.tools.is_empty() {
            request = request.with_tools(self.tools.clone());
        }
        request.cache_salt = self.cache_salt.clone();
        request
    }
}

impl UserSimulator for LlmUser {
    fn name(&self) -> &str {
        self.model.name()
    }

    fn respond<'a>(&'a mut self, conversation: &'a [Utterance]) -> UserFuture<'a> {
        Box::pin(async move {
            let request = self.build_request(conversation);
            let response = self.model.chat(&request).await?;
            if !self.tools.is_empty() && !response.tool_calls.is_empty() {
                return Ok(UserTurn::device(response.tool_calls.clone()));
            }
            let text = response.text().trim();
            if text.is_empty() {
                return Err(UserSimError::EmptyReply);
            }
            Ok(UserTurn::from_text(text))
        })
    }
}

//! User simulators: the τ²-style conversational user.
//!
//! A [`UserSimulator`] sees the conversation *from the user's side*: the
//! agent's messages as text (no tool calls, no tool results, nothing the
//! harness injected for the agent) and its own earlier messages. It answers
//! with a [`UserTurn`]; the conversation ends when the text holds
//! `###STOP###`, `###TRANSFER###` or `###OUT-OF-SCOPE###` ([`UserStop`]).
//!
//! In a dual-control domain (τ² telecom) the user also has tools, acting on
//! their own device: a turn may be device calls instead of a message
//! ([`UserTurn::calls`]); the loop runs them on the user's side of the
//! environment and hands the results back as [`Speaker::Device`]
//! utterances, and the user speaks to the agent when it is ready. The agent
//! sees only what the user says.
//!
//! * [`LlmUser`]: an LLM plays the customer, with our own simulation
//!   guidelines ([`USER_GUIDELINES`]) and the task's scenario.
//! * [`ScriptedUser`]: deterministic and offline, driven by the task's
//!   structured instructions ([`UserScript`]).

mod llm;
mod scripted;

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::error::{ErrorClass, ModelError};

pub use llm::{DEVICE_GUIDELINES, LlmUser, USER_GUIDELINES, scenario_from_prompt};
pub use scripted::{
    CONFIRM_LINE, NEUTRAL_LINE, NEUTRAL_QUESTION_LINE, ScriptedUser, UserScript, device_report,
};

use crate::types::ToolCall;

/// Token: the user is done.
pub const STOP_TOKEN: &str = "###STOP###";
/// Token: the user has been transferred to a human agent.
pub const TRANSFER_TOKEN: &str = "###TRANSFER###";
/// Token: the scenario does not cover what the conversation asks.
pub const OUT_OF_SCOPE_TOKEN: &str = "###OUT-OF-SCOPE###";

/// Who spoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Speaker {
    /// The agent under test.
    Agent,
    /// The user (simulator).
    User,
    /// The user's own device, answering a device call.
    Device,
}

/// One message of the conversation as the user sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Utterance {
    /// Who spoke.
    pub speaker: Speaker,
    /// What was said (a device's result text; empty for a turn of device
    /// calls).
    pub text: String,
    /// A user turn that acted on the device: its calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<ToolCall>,
    /// A device result: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
}

impl Utterance {
    fn said(speaker: Speaker, text: String) -> Self {
        Self {
            speaker,
            text,
            calls: Vec::new(),
            call_id: None,
        }
    }

    /// Something the agent said.
    pub fn agent(text: impl Into<String>) -> Self {
        Self::said(Speaker::Agent, text.into())
    }

    /// Something the user said.
    pub fn user(text: impl Into<String>) -> Self {
        Self::said(Speaker::User, text.into())
    }

    /// A user turn of device calls.
    pub fn device_calls(calls: Vec<ToolCall>) -> Self {
        Self {
            calls,
            ..Self::said(Speaker::User, String::new())
        }
    }

    /// The device's answer to call `call_id`.
    pub fn device(call_id: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            call_id: Some(call_id.into()),
            ..Self::said(Speaker::Device, text.into())
        }
    }

    /// Whether this is a message the user sent to the agent (not device
    /// calls).
    pub fn is_user_message(&self) -> bool {
        self.speaker == Speaker::User && self.calls.is_empty()
    }
}

/// How the user ended the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UserStop {
    /// `###STOP###`: the task is done (or the user gives up).
    Stop,
    /// `###TRANSFER###`: the agent transferred the user.
    Transfer,
    /// `###OUT-OF-SCOPE###`: the scenario does not cover the conversation.
    OutOfScope,
}

impl UserStop {
    /// The token that ends the conversation this way.
    pub fn token(self) -> &'static str {
        match self {
            Self::Stop => STOP_TOKEN,
            Self::Transfer => TRANSFER_TOKEN,
            Self::OutOfScope => OUT_OF_SCOPE_TOKEN,
        }
    }
}

/// The stop token in `text`, if any (the first in the order
/// stop, transfer, out-of-scope when several appear).
pub fn detect_stop(text: &str) -> Option<UserStop> {
    [UserStop::Stop, UserStop::Transfer, UserStop::OutOfScope]
        .into_iter()
        .find(|s| text.contains(s.token()))
}

/// The user's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserTurn {
    /// The message as the user wrote it (tokens included).
    pub text: String,
    /// Set when the text holds a stop token: the conversation ends.
    pub stop: Option<UserStop>,
    /// Device calls: when any, the turn acts on the user's device instead
    /// of speaking to the agent (its text is not sent), and the user is
    /// asked again once their results are in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<ToolCall>,
}

impl UserTurn {
    /// A turn from text, with its stop token detected.
    pub fn from_text(text: impl Into<String>) -> Self {
        let text = text.into();
        let stop = detect_stop(&text);
        Self {
            text,
            stop,
            calls: Vec::new(),
        }
    }

    /// A turn of device calls.
    pub fn device(calls: Vec<ToolCall>) -> Self {
        Self {
            text: String::new(),
            stop: None,
            calls,
        }
    }
}

/// A failed user turn.
#[derive(Debug, Error)]
pub enum UserSimError {
    /// The simulator's model call failed.
    #[error("user simulator model failed: {0}")]
    Model(#[from] ModelError),
    /// The simulator model answered with no text.
    #[error("the user simulator produced an empty message")]
    EmptyReply,
}

impl UserSimError {
    /// Infrastructure errors requeue the episode; the rest end it as a user
    /// error.
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::Model(error) => error.class(),
            Self::EmptyReply => ErrorClass::Model,
        }
    }
}

/// The future a [`UserSimulator`] returns.
pub type UserFuture<'a> = Pin<Box<dyn Future<Output = Result<UserTurn, UserSimError>> + Send + 'a>>;

/// Anything that plays the user. One per episode.
pub trait UserSimulator: Send {
    /// For trajectories and logs: `scripted` or the model's name.
    fn name(&self) -> &str;

    /// The user's next message, given the conversation so far from the
    /// user's side (oldest first; usually ending with an agent message).
    fn respond<'a>(&'a mut self, conversation: &'a [Utterance]) -> UserFuture<'a>;
}

#[cfg(test)]
mod tests;

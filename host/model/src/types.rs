//! Backend-neutral request/response types and the [`ChatModel`] trait.
//!
//! The serde forms of [`ChatMessage`], [`ToolCall`], [`FunctionTool`] and
//! [`ToolChoice`] are exactly the OpenAI wire forms, so a message list can be
//! sent as-is, stored in a trajectory and read back without a second schema.

use std::future::Future;
use std::pin::Pin;

use std::sync::Arc;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value, json};

use crate::error::ModelError;
use crate::sim::TestbedNote;

/// One message of a chat conversation, serialized in OpenAI form
/// (`{"role": "...", ...}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum ChatMessage {
    /// Instructions for the model (the policy, harness notes).
    System {
        /// The instruction text. Shared: an episode sends its system
        /// prompt (7 KiB for τ² retail) with every agent call, and each call
        /// copied it with the rest of the conversation.
        content: Arc<str>,
    },
    /// What the user (simulator) said.
    User {
        /// The user's text.
        content: String,
    },
    /// `content` is `null` on the wire when the model only called tools.
    Assistant {
        /// The text, `None` when the model only called tools.
        content: Option<String>,
        /// The structured calls of this turn.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of the tool call `tool_call_id`.
    Tool {
        /// The id of the call answered.
        tool_call_id: String,
        /// The tool's answer.
        content: String,
    },
}

impl ChatMessage {
    /// A system message.
    pub fn system(content: impl Into<Arc<str>>) -> Self {
        Self::System {
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::User {
            content: content.into(),
        }
    }

    /// A plain assistant text turn.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::Assistant {
            content: Some(content.into()),
            tool_calls: Vec::new(),
        }
    }

    /// An assistant turn with structured calls (and optional text).
    pub fn assistant_with_tool_calls(content: Option<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self::Assistant {
            content,
            tool_calls,
        }
    }

    /// The answer to the tool call `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self::Tool {
            tool_call_id: tool_call_id.into(),
            content: content.into(),
        }
    }

    /// The wire role name.
    pub fn role(&self) -> &'static str {
        match self {
            Self::System { .. } => "system",
            Self::User { .. } => "user",
            Self::Assistant { .. } => "assistant",
            Self::Tool { .. } => "tool",
        }
    }

    /// The text content ("" for an assistant turn with only tool calls).
    pub fn text(&self) -> &str {
        match self {
            Self::System { content } => content,
            Self::User { content } | Self::Tool { content, .. } => content,
            Self::Assistant { content, .. } => content.as_deref().unwrap_or(""),
        }
    }
}

/// A tool call as the model produced it.
///
/// `arguments` is the raw text the model wrote, *not* parsed: a model that
/// emits invalid JSON is exactly what the harness must see and may repair.
/// On the wire it is `{"id", "type": "function", "function": {"name",
/// "arguments"}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The call's id, echoed by its result (`call_<n>` when the server sent
    /// none).
    pub id: String,
    /// The function name as the model wrote it.
    pub name: String,
    /// The arguments text as the model wrote it, unparsed.
    pub arguments: String,
}

impl ToolCall {
    /// A call from its parts.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// The arguments parsed as JSON, if they are valid JSON.
    pub fn parsed_arguments(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(&self.arguments)
    }
}

/// Written as maps, entry by entry, in the order `json!` built them before
/// (`preserve_order`), so the bytes are the same without a `Value` tree per
/// call: every request and every trajectory record writes each call.
impl Serialize for ToolCall {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;

        struct Function<'a>(&'a ToolCall);

        impl Serialize for Function<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(Some(2))?;
                map.serialize_entry("name", &self.0.name)?;
                map.serialize_entry("arguments", &self.0.arguments)?;
                map.end()
            }
        }

        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("id", &self.id)?;
        map.serialize_entry("type", "function")?;
        map.serialize_entry("function", &Function(self))?;
        map.end()
    }
}

impl<'de> Deserialize<'de> for ToolCall {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        tool_call_from_wire(&value, 0).ok_or_else(|| D::Error::custom("not a tool call"))
    }
}

/// Lenient reading of one wire tool call: servers differ (a missing `id`,
/// arguments sent as an object instead of a string), and none of that should
/// hide the call from the harness. Only a missing `function` object is fatal.
pub(crate) fn tool_call_from_wire(value: &Value, index: usize) -> Option<ToolCall> {
    let function = value.get("function")?.as_object()?;
    let id = match value.get("id").and_then(Value::as_str) {
        Some(id) if !id.is_empty() => id.to_owned(),
        _ => format!("call_{index}"),
    };
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let arguments = match function.get("arguments") {
        Some(Value::String(text)) => text.clone(),
        None | Some(Value::Null) => String::new(),
        Some(other) => other.to_string(),
    };
    Some(ToolCall {
        id,
        name,
        arguments,
    })
}

/// A tool offered to the model, in OpenAI function form. `parameters` is a
/// JSON Schema object.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionTool {
    /// The function name.
    pub name: String,
    /// What the tool does, as the model reads it.
    pub description: String,
    /// JSON Schema of the arguments (shared: a domain's schemas go to every
    /// episode's requests unchanged).
    pub parameters: std::sync::Arc<Value>,
}

impl FunctionTool {
    /// A tool from its parts (`parameters`: a JSON Schema object).
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: impl Into<std::sync::Arc<Value>>,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters: parameters.into(),
        }
    }

    /// Reads `{"type":"function","function":{...}}` or the bare
    /// `{"name","description","parameters"}` object.
    pub fn from_json(value: &Value) -> Option<Self> {
        let function = value.get("function").unwrap_or(value);
        Some(Self {
            name: function.get("name")?.as_str()?.to_owned(),
            description: function
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            parameters: std::sync::Arc::new(
                function
                    .get("parameters")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
            ),
        })
    }
}

impl Serialize for FunctionTool {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        })
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for FunctionTool {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Self::from_json(&value).ok_or_else(|| D::Error::custom("not a function tool"))
    }
}

/// `tool_choice`: `"auto" | "none" | "required"` or one named function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides whether to call a tool.
    Auto,
    /// The model must not call tools.
    None,
    /// The model must call at least one tool.
    Required,
    /// The model must call this function.
    Function(String),
}

impl Serialize for ToolChoice {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => serializer.serialize_str("auto"),
            Self::None => serializer.serialize_str("none"),
            Self::Required => serializer.serialize_str("required"),
            Self::Function(name) => {
                json!({"type": "function", "function": {"name": name}}).serialize(serializer)
            }
        }
    }
}

impl<'de> Deserialize<'de> for ToolChoice {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        match &value {
            Value::String(s) if s == "auto" => Ok(Self::Auto),
            Value::String(s) if s == "none" => Ok(Self::None),
            Value::String(s) if s == "required" => Ok(Self::Required),
            _ => value
                .pointer("/function/name")
                .and_then(Value::as_str)
                .map(|name| Self::Function(name.to_owned()))
                .ok_or_else(|| D::Error::custom("unknown tool_choice")),
        }
    }
}

/// Sampling arguments; `None`/empty fields are left out of the request so
/// the endpoint's own defaults apply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingArgs {
    /// Sampling temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus-sampling mass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Seed for endpoints that sample reproducibly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Cap on completion tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Stop sequences.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
}

/// One chat-completion request, independent of which model serves it (the
/// model name and the role's extra args come from the [`ChatModel`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// Shared: an episode sends the same tool schemas with every turn, and
    /// deep-copying them per request was a measurable share of host CPU.
    #[serde(skip_serializing_if = "<[FunctionTool]>::is_empty")]
    pub tools: Arc<[FunctionTool]>,
    /// Whether and which tools the model must call (`None`: the endpoint's
    /// default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Temperature, top-p, seed, token cap and stop sequences.
    pub sampling: SamplingArgs,
    /// Extra top-level body fields for this request; they override the
    /// role's configured extra args and the fields above.
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
    /// Enters the response-cache key but is never sent. Repeated trials of
    /// the same task (pass^k) must set distinct salts, or trial 2 would
    /// replay trial 1 from the cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_salt: Option<String>,
}

/// The body field that asks an OpenAI-compatible endpoint to constrain the
/// reply to a JSON schema: `("response_format", {...})` in the form OpenAI,
/// vLLM and llama.cpp's server all take, for [`ChatRequest::extra`].
pub fn response_format_json_schema(name: &str, schema: Value) -> (String, Value) {
    (
        "response_format".to_string(),
        serde_json::json!({
            "type": "json_schema",
            "json_schema": {"name": name, "strict": true, "schema": schema},
        }),
    )
}

impl ChatRequest {
    /// A request for `messages`, with no tools and default sampling.
    pub fn new(messages: Vec<ChatMessage>) -> Self {
        Self {
            messages,
            ..Self::default()
        }
    }

    /// Offer these tools.
    pub fn with_tools(mut self, tools: impl Into<Arc<[FunctionTool]>>) -> Self {
        self.tools = tools.into();
        self
    }

    /// Constrain tool calling.
    pub fn with_tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = Some(choice);
        self
    }

    /// Set the sampling arguments.
    pub fn with_sampling(mut self, sampling: SamplingArgs) -> Self {
        self.sampling = sampling;
        self
    }

    /// Add one extra top-level body field.
    pub fn with_extra(mut self, key: impl Into<String>, value: Value) -> Self {
        self.extra.insert(key.into(), value);
        self
    }

    /// Set the response-cache salt (see `cache_salt`).
    pub fn with_cache_salt(mut self, salt: impl Into<String>) -> Self {
        self.cache_salt = Some(salt.into());
        self
    }
}

/// Token usage of one completion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Usage {
    /// Prompt tokens the endpoint counted.
    pub prompt_tokens: u64,
    /// Completion tokens the endpoint counted.
    pub completion_tokens: u64,
    /// Prompt tokens served from the endpoint's prefix cache (a subset of
    /// `prompt_tokens`), from `usage.prompt_tokens_details.cached_tokens`
    /// (or DeepSeek's `prompt_cache_hit_tokens`).
    pub cached_prompt_tokens: u64,
}

/// The assistant turn the model produced.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChatResponse {
    /// The raw assistant text, kept even when structured tool calls exist:
    /// the harness's realization hook rescues calls written as text.
    pub content: Option<String>,
    /// Structured tool calls, their arguments as the model wrote them
    /// (possibly invalid JSON, for the harness to repair).
    pub tool_calls: Vec<ToolCall>,
    /// Why generation stopped (`stop`, `tool_calls`, `length`...), as the
    /// endpoint said.
    pub finish_reason: Option<String>,
    /// `None` when the endpoint reported no usage.
    pub usage: Option<Usage>,
    /// The model name the endpoint reported (may differ from the requested
    /// name, e.g. a dated snapshot).
    pub model: Option<String>,
    /// Reasoning text some servers return separately (`reasoning_content`).
    pub reasoning: Option<String>,
    /// True when this response was replayed from the response cache.
    pub cached: bool,
    /// HTTP attempts it took (1 = no retry); 0 for cache hits and
    /// non-HTTP models.
    pub attempts: u32,
    /// Ground truth of a simulated (`sim:<profile>`) agent: the quirks that
    /// fired on this turn and the ones harness feedback corrected. Testbed
    /// only; `None` for every real model, and absent from the serialized form
    /// then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub testbed: Option<TestbedNote>,
}

impl ChatResponse {
    /// The assistant text, "" when absent.
    pub fn text(&self) -> &str {
        self.content.as_deref().unwrap_or("")
    }

    /// The turn as a message to append to the conversation.
    pub fn to_message(&self) -> ChatMessage {
        ChatMessage::Assistant {
            content: self.content.clone(),
            tool_calls: self.tool_calls.clone(),
        }
    }
}

/// The future a [`ChatModel`] returns (boxed so the trait is object-safe and
/// the runner can hold `Arc<dyn ChatModel>`).
pub type ModelFuture<'a> =
    Pin<Box<dyn Future<Output = Result<ChatResponse, ModelError>> + Send + 'a>>;

/// The future of [`ChatModel::count_tokens`].
pub type CountFuture<'a> = Pin<Box<dyn Future<Output = Option<usize>> + Send + 'a>>;

/// Anything that answers chat requests: the HTTP client, a simulated model,
/// or a wrapper adding cache and accounting.
pub trait ChatModel: Send + Sync {
    /// The configured model name; used for pricing, the ledger and the cache
    /// key.
    fn name(&self) -> &str;

    /// Everything that determines the reply to `request`, as JSON; the
    /// response cache hashes its canonical form. The default covers the name
    /// and the request; the HTTP model returns the exact wire body.
    fn fingerprint(&self, request: &ChatRequest) -> Value {
        json!({
            "model": self.name(),
            "request": serde_json::to_value(request).unwrap_or(Value::Null),
        })
    }

    /// Answer `request`. Errors are classified ([`ModelError::class`]) so the
    /// runner knows whether to requeue, stop or score.
    fn chat<'a>(&'a self, request: &'a ChatRequest) -> ModelFuture<'a>;

    /// How many tokens the serving endpoint's own tokenizer makes of
    /// `text`, where it offers one (llama.cpp's and vLLM's `POST
    /// /tokenize`); `None` where it does not or the call fails. Prompt
    /// budgets use it in place of an estimate.
    fn count_tokens<'a>(&'a self, text: &'a str) -> CountFuture<'a> {
        let _ = text;
        Box::pin(async { None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_serialize_in_openai_form() {
        let call = ToolCall::new("c1", "get_order", "{\"id\":\"#1\"}");
        let messages = vec![
            ChatMessage::system("s"),
            ChatMessage::assistant_with_tool_calls(None, vec![call.clone()]),
            ChatMessage::tool("c1", "ok"),
        ];
        let value = serde_json::to_value(&messages).unwrap();
        assert_eq!(
            value,
            json!([
                {"role": "system", "content": "s"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "get_order", "arguments": "{\"id\":\"#1\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}
            ])
        );
        let back: Vec<ChatMessage> = serde_json::from_value(value).unwrap();
        assert_eq!(back, messages);
    }

    #[test]
    fn a_tool_call_writes_the_bytes_of_its_json_form() {
        let call = ToolCall::new("c\"1", "get_order", "{\"id\":\"#1\\n\"}");
        let old = json!({
            "id": call.id,
            "type": "function",
            "function": { "name": call.name, "arguments": call.arguments },
        });
        assert_eq!(
            serde_json::to_string(&call).unwrap(),
            serde_json::to_string(&old).unwrap()
        );
        assert_eq!(
            serde_json::to_string_pretty(&call).unwrap(),
            serde_json::to_string_pretty(&old).unwrap()
        );
        assert_eq!(serde_json::to_value(&call).unwrap(), old);
    }

    #[test]
    fn plain_assistant_turn_has_no_tool_calls_field() {
        let value = serde_json::to_value(ChatMessage::assistant("hi")).unwrap();
        assert_eq!(value, json!({"role": "assistant", "content": "hi"}));
    }

    #[test]
    fn tool_call_reading_is_lenient() {
        let call = tool_call_from_wire(
            &json!({"function": {"name": "f", "arguments": {"a": 1}}}),
            3,
        )
        .unwrap();
        assert_eq!(call, ToolCall::new("call_3", "f", "{\"a\":1}"));
        assert!(tool_call_from_wire(&json!({"id": "x"}), 0).is_none());
    }

    #[test]
    fn tool_choice_and_tools_round_trip() {
        for choice in [
            ToolChoice::Auto,
            ToolChoice::None,
            ToolChoice::Required,
            ToolChoice::Function("f".into()),
        ] {
            let value = serde_json::to_value(&choice).unwrap();
            assert_eq!(serde_json::from_value::<ToolChoice>(value).unwrap(), choice);
        }
        let tool = FunctionTool::new("f", "does f", json!({"type": "object"}));
        let value = serde_json::to_value(&tool).unwrap();
        assert_eq!(value["type"], "function");
        assert_eq!(value["function"]["name"], "f");
        assert_eq!(serde_json::from_value::<FunctionTool>(value).unwrap(), tool);
    }

    #[test]
    fn sampling_omits_unset_fields() {
        let sampling = SamplingArgs {
            temperature: Some(0.0),
            ..SamplingArgs::default()
        };
        assert_eq!(
            serde_json::to_value(&sampling).unwrap(),
            json!({"temperature": 0.0})
        );
    }
}

//! A client's Chat Completions request, checked and read into the parts the
//! hooks see. The request's own JSON is kept: what the proxy does not
//! change reaches the upstream as the client wrote it.

use serde::Serialize;
use serde_json::{Map, Value};

use ecdysis_sandbox::sandbox::ToolSpec;

use crate::error::ProxyError;

/// A tool call as the conversation carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Call {
    /// The call's id.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, as JSON text.
    pub arguments: String,
}

impl Call {
    /// The OpenAI wire form of the call.
    pub fn to_wire(&self) -> Value {
        serde_json::json!({
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        })
    }
}

/// One message, as far as the hooks are concerned. Its hash identifies a
/// history: two messages that read the same to the hooks hash alike
/// whatever optional fields (`refusal: null`, `name`) a client adds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Msg {
    /// A `system` or `developer` message.
    System {
        /// Its text.
        text: String,
    },
    /// A user message.
    User {
        /// Its text (the text parts of a list, joined).
        text: String,
    },
    /// An assistant message.
    Assistant {
        /// Its text, if any.
        text: Option<String>,
        /// Its tool calls.
        calls: Vec<Call>,
    },
    /// A tool result.
    Tool {
        /// The call it answers.
        tool_call_id: String,
        /// The result's text.
        text: String,
    },
}

/// A checked request.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The body as the client sent it.
    pub body: Map<String, Value>,
    /// Its messages as the hooks read them, in order.
    pub messages: Vec<Msg>,
    /// Its tools as the harness sees them (`mutates` is always false: the
    /// proxy cannot know, and no environment is attached to run them).
    pub tools: Vec<ToolSpec>,
    /// `stream: true`.
    pub stream: bool,
    /// `stream_options.include_usage: true`.
    pub include_usage: bool,
}

/// The text of a `content` field: a string, null, or a list of parts whose
/// `text` parts are joined (other parts, such as images, are the
/// upstream's, not the harness's).
fn content_text(content: Option<&Value>, param: &str) -> Result<Option<String>, ProxyError> {
    match content {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (k, part) in parts.iter().enumerate() {
                let Some(part) = part.as_object() else {
                    return Err(ProxyError::invalid(
                        format!("{param}[{k}]"),
                        "a content part must be an object",
                    ));
                };
                if part.get("type").and_then(Value::as_str) == Some("text") {
                    let Some(t) = part.get("text").and_then(Value::as_str) else {
                        return Err(ProxyError::invalid(
                            format!("{param}[{k}].text"),
                            "a text part needs a string `text`",
                        ));
                    };
                    text.push_str(t);
                }
            }
            Ok(Some(text))
        }
        Some(_) => Err(ProxyError::invalid(
            param,
            "content must be a string, null or a list of parts",
        )),
    }
}

fn calls_of(message: &Map<String, Value>, param: &str) -> Result<Vec<Call>, ProxyError> {
    let Some(raw) = message.get("tool_calls").filter(|v| !v.is_null()) else {
        return Ok(vec![]);
    };
    let Some(list) = raw.as_array() else {
        return Err(ProxyError::invalid(param, "tool_calls must be a list"));
    };
    let mut calls = Vec::with_capacity(list.len());
    for (k, call) in list.iter().enumerate() {
        let here = format!("{param}[{k}]");
        let id = call.get("id").and_then(Value::as_str);
        let function = call.get("function");
        let name = function.and_then(|f| f.get("name")).and_then(Value::as_str);
        let arguments = function
            .and_then(|f| f.get("arguments"))
            .and_then(Value::as_str);
        match (id, name, arguments) {
            (Some(id), Some(name), Some(arguments)) => calls.push(Call {
                id: id.to_string(),
                name: name.to_string(),
                arguments: arguments.to_string(),
            }),
            (None, ..) => return Err(ProxyError::invalid(format!("{here}.id"), "missing id")),
            (_, None, _) => {
                return Err(ProxyError::invalid(
                    format!("{here}.function.name"),
                    "missing function name",
                ));
            }
            (.., None) => {
                return Err(ProxyError::invalid(
                    format!("{here}.function.arguments"),
                    "missing arguments text",
                ));
            }
        }
    }
    Ok(calls)
}

fn tools_of(body: &Map<String, Value>) -> Result<Vec<ToolSpec>, ProxyError> {
    let Some(raw) = body.get("tools").filter(|v| !v.is_null()) else {
        return Ok(vec![]);
    };
    let Some(list) = raw.as_array() else {
        return Err(ProxyError::invalid("tools", "tools must be a list"));
    };
    let mut tools = Vec::with_capacity(list.len());
    for (k, tool) in list.iter().enumerate() {
        let function = tool.get("function").and_then(Value::as_object);
        let Some(function) = function else {
            return Err(ProxyError::invalid(
                format!("tools[{k}].function"),
                "a tool needs a `function` object",
            ));
        };
        let Some(name) = function.get("name").and_then(Value::as_str) else {
            return Err(ProxyError::invalid(
                format!("tools[{k}].function.name"),
                "a tool needs a name",
            ));
        };
        let parameters = function
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
        tools.push(ToolSpec {
            name: name.to_string(),
            description: function
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            parameters: parameters.to_string(),
            mutates: false,
        });
    }
    Ok(tools)
}

impl ChatRequest {
    /// Check a body and read it.
    pub fn parse(bytes: &[u8]) -> Result<Self, ProxyError> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| ProxyError::InvalidRequest {
                message: format!("the body is not JSON: {e}"),
                param: None,
            })?;
        let Value::Object(body) = value else {
            return Err(ProxyError::InvalidRequest {
                message: "the body must be a JSON object".into(),
                param: None,
            });
        };
        if !body.get("model").is_some_and(Value::is_string) {
            return Err(ProxyError::invalid("model", "model must be a string"));
        }
        let stream = match body.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(ProxyError::invalid("stream", "stream must be a boolean")),
        };
        let include_usage = body
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let n = body.get("n").and_then(Value::as_u64).unwrap_or(1);
        if n != 1 {
            return Err(ProxyError::invalid(
                "n",
                "the proxy answers one choice per request (n = 1)",
            ));
        }
        let tools = tools_of(&body)?;
        let Some(list) = body.get("messages").and_then(Value::as_array) else {
            return Err(ProxyError::invalid("messages", "messages must be a list"));
        };
        let mut messages = Vec::with_capacity(list.len());
        let mut open_calls: Vec<String> = Vec::new();
        for (i, m) in list.iter().enumerate() {
            let here = format!("messages[{i}]");
            let Some(m) = m.as_object() else {
                return Err(ProxyError::invalid(here, "a message must be an object"));
            };
            let content = format!("{here}.content");
            let role = m.get("role").and_then(Value::as_str);
            let msg = match role {
                Some("system" | "developer") => Msg::System {
                    text: content_text(m.get("content"), &content)?.unwrap_or_default(),
                },
                Some("user") => Msg::User {
                    text: content_text(m.get("content"), &content)?.unwrap_or_default(),
                },
                Some("assistant") => {
                    let calls = calls_of(m, &format!("{here}.tool_calls"))?;
                    open_calls = calls.iter().map(|c| c.id.clone()).collect();
                    // Clients echo a reply without text as null, "" or no
                    // field at all: the same message to the hooks.
                    Msg::Assistant {
                        text: content_text(m.get("content"), &content)?.filter(|t| !t.is_empty()),
                        calls,
                    }
                }
                Some("tool") => {
                    let Some(id) = m.get("tool_call_id").and_then(Value::as_str) else {
                        return Err(ProxyError::invalid(
                            format!("{here}.tool_call_id"),
                            "a tool message needs a tool_call_id",
                        ));
                    };
                    // A result must answer a call of the assistant message
                    // before it: any other id is a call the conversation
                    // never issued.
                    if !open_calls.iter().any(|c| c == id) {
                        return Err(ProxyError::invalid(
                            format!("{here}.tool_call_id"),
                            format!(
                                "`{id}` answers no tool call of the assistant message before it"
                            ),
                        ));
                    }
                    Msg::Tool {
                        tool_call_id: id.to_string(),
                        text: content_text(m.get("content"), &content)?.unwrap_or_default(),
                    }
                }
                Some(other) => {
                    return Err(ProxyError::invalid(
                        format!("{here}.role"),
                        format!("unknown role `{other}`"),
                    ));
                }
                None => {
                    return Err(ProxyError::invalid(
                        format!("{here}.role"),
                        "a message needs a role",
                    ));
                }
            };
            if matches!(msg, Msg::User { .. } | Msg::System { .. }) {
                open_calls.clear();
            }
            messages.push(msg);
        }
        if !messages.iter().any(|m| matches!(m, Msg::User { .. })) {
            return Err(ProxyError::invalid(
                "messages",
                "a conversation needs a user message",
            ));
        }
        Ok(ChatRequest {
            body,
            messages,
            tools,
            stream,
            include_usage,
        })
    }

    /// The raw messages of the body (checked by [`ChatRequest::parse`]).
    pub fn raw_messages(&self) -> &[Value] {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// Number of leading `system`/`developer` messages: together they are
    /// the system prompt the contract rewrites.
    pub fn leading_system(&self) -> usize {
        self.messages
            .iter()
            .take_while(|m| matches!(m, Msg::System { .. }))
            .count()
    }

    /// The system prompt: the leading system messages' texts, joined.
    pub fn system_prompt(&self) -> String {
        self.messages[..self.leading_system()]
            .iter()
            .filter_map(|m| match m {
                Msg::System { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n\n")
    }

    /// The first user message's text.
    pub fn first_user_message(&self) -> &str {
        self.messages
            .iter()
            .find_map(|m| match m {
                Msg::User { text } => Some(text.as_str()),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// The conversation's id: the explicit one, else the hash of its system
    /// prompt and first user message (what every later request repeats).
    pub fn conversation_id(&self, explicit: Option<&str>) -> String {
        if let Some(id) = explicit.filter(|s| !s.is_empty()) {
            return id.to_string();
        }
        let mut h = blake3::Hasher::new();
        for part in [self.system_prompt(), self.first_user_message().to_string()] {
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        h.finalize().to_hex()[..32].to_string()
    }

    /// The hash of the tools as the harness sees them: a different tool set
    /// is a different episode.
    pub fn tools_hash(&self) -> blake3::Hash {
        let text = serde_json::to_string(&self.tools).unwrap_or_default();
        blake3::hash(text.as_bytes())
    }
}

/// The chained hashes of a history's prefixes: `out[k]` identifies the
/// conversation `conversation` after its first `k` messages, under the
/// tools of `tools`.
pub fn prefix_hashes(conversation: &str, tools: blake3::Hash, messages: &[Msg]) -> Vec<[u8; 32]> {
    let mut h = blake3::Hasher::new();
    h.update(conversation.as_bytes());
    h.update(tools.as_bytes());
    let mut out = Vec::with_capacity(messages.len() + 1);
    let mut last = *h.finalize().as_bytes();
    out.push(last);
    for m in messages {
        last = chain(&last, m);
        out.push(last);
    }
    out
}

/// The hash of a prefix hashed `prefix`, followed by `message`.
pub fn chain(prefix: &[u8; 32], message: &Msg) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(prefix);
    // Serialised straight into the hasher: no text of the message is kept.
    let _ = serde_json::to_writer(&mut h, message);
    *h.finalize().as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(body: &str) -> Option<String> {
        match ChatRequest::parse(body.as_bytes()) {
            Err(ProxyError::InvalidRequest { param, .. }) => param,
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn a_malformed_body_is_refused_naming_the_field() {
        assert_eq!(param("{"), None);
        assert_eq!(param(r#"{"messages": []}"#).as_deref(), Some("model"));
        assert_eq!(
            param(r#"{"model": "m", "messages": 3}"#).as_deref(),
            Some("messages")
        );
        assert_eq!(
            param(r#"{"model": "m", "messages": [{"content": "hi"}]}"#).as_deref(),
            Some("messages[0].role")
        );
        assert_eq!(
            param(r#"{"model": "m", "messages": [{"role": "user", "content": 5}]}"#).as_deref(),
            Some("messages[0].content")
        );
        assert_eq!(
            param(r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {}}]}"#).as_deref(),
            Some("tools[0].function.name")
        );
        assert_eq!(
            param(
                r#"{"model": "m", "stream": "yes", "messages": [{"role": "user", "content": "x"}]}"#
            )
            .as_deref(),
            Some("stream")
        );
        // A result for a call the conversation never made.
        assert_eq!(
            param(r#"{"model": "m", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function", "function": {"name": "t", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "b", "content": "r"}]}"#).as_deref(),
            Some("messages[2].tool_call_id")
        );
    }

    #[test]
    fn the_conversation_is_its_opening_and_optional_fields_do_not_change_a_history() {
        let a = ChatRequest::parse(br#"{"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "hi", "refusal": null}]}"#).unwrap();
        let b = ChatRequest::parse(br#"{"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "u"}]}, {"role": "assistant", "content": "hi"}]}"#).unwrap();
        let call =
            r#"[{"id": "c", "type": "function", "function": {"name": "t", "arguments": "{}"}}]"#;
        let with = |content: &str| {
            let body = format!(
                r#"{{"model": "m", "messages": [{{"role": "user", "content": "u"}}, {{"role": "assistant", {content} "tool_calls": {call}}}]}}"#
            );
            ChatRequest::parse(body.as_bytes()).unwrap().messages
        };
        assert_eq!(with(r#""content": null,"#), with(r#""content": "","#));
        assert_eq!(with(""), with(r#""content": null,"#));
        assert_eq!(a.conversation_id(None), b.conversation_id(None));
        assert_eq!(
            prefix_hashes("c", a.tools_hash(), &a.messages),
            prefix_hashes("c", b.tools_hash(), &b.messages)
        );
        assert_ne!(a.conversation_id(Some("x")), a.conversation_id(None));
    }
}
